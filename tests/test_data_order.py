from rlrun.data_order import DataOrder


def test_each_epoch_visits_every_problem_once():
    order = DataOrder(7, seed=3)
    first, second = order.draw(7), order.draw(7)
    assert sorted(first) == list(range(7))
    assert sorted(second) == list(range(7))
    assert first != second  # a new shuffle per epoch


def test_resuming_from_a_position_continues_the_same_stream():
    straight = DataOrder(5, seed=1)
    expected = straight.draw(3) + straight.draw(4) + straight.draw(6)
    head = DataOrder(5, seed=1)
    drawn = head.draw(3) + head.draw(4)
    resumed = DataOrder(5, seed=1, position=head.position)
    assert drawn + resumed.draw(6) == expected
    assert resumed.position == 13


def test_the_seed_sets_the_order():
    assert DataOrder(50, seed=0).draw(50) != DataOrder(50, seed=1).draw(50)
    assert DataOrder(50, seed=4).draw(50) == DataOrder(50, seed=4).draw(50)
