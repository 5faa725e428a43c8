"""StopSignals: every stop signal asks for a clean stop in the loop, and ends the run at once
before it or when sent twice. (tests/test_training_signals.py sends them to a real run.)"""

import os
import signal

import pytest

from rlrun.interrupts import SIGNALS, Interrupted, StopSignals


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_in_the_loop_a_signal_asks_for_a_clean_stop_and_a_second_one_stops_at_once(sig, capsys):
    with StopSignals() as stop:
        stop.graceful = True
        os.kill(os.getpid(), sig)
        assert stop.requested.is_set() and stop.signal_name == sig.name
        assert f"{sig.name}: finishing the step in flight" in capsys.readouterr().err
        with pytest.raises(Interrupted, match=f"stopped by {sig.name} while starting"):
            os.kill(os.getpid(), sig)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_before_the_loop_a_signal_stops_at_once_naming_the_phase(sig):
    with StopSignals() as stop:
        stop.phase = "during the SFT warm-start"
        with pytest.raises(Interrupted, match=f"stopped by {sig.name} during the SFT"):
            os.kill(os.getpid(), sig)
        assert not stop.requested.is_set()


def test_the_previous_handlers_are_back_on_exit():
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    with StopSignals():
        assert all(signal.getsignal(sig) != before[sig] for sig in SIGNALS)
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == before
