"""Multi-turn episodes judged by the real sandbox pool on Ray: a sandbox actor killed while turn
2's programs are being judged costs a judging, never an episode."""

import pytest
import ray

from actors.sandbox import SandboxPool
from rlrun.data.toy import repair_problems
from rlrun.multiturn import episode_metrics
from tests.test_multiturn import ScriptedPolicy, config, run

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("ray_cluster")]

# Slow enough that turn 2's judging is still in flight when its actor is killed.
SLOW_FIRST = "```python\nimport time\ntime.sleep(0.3)\nprint(input())\n```"


def test_killing_a_sandbox_actor_during_turn_2_judges_the_episodes_again():
    cfg = config("sandbox.num_actors=2", "sandbox.workers_per_actor=1", "sandbox.num_cpus=0.5")
    problems = repair_problems(6, seed=4)
    calls = []
    with SandboxPool(cfg.sandbox, prefix="repair-kill", chunk_size=1) as pool:

        def judge(subs):
            calls.append(len(subs))
            handle = pool.submit(subs)
            if len(calls) == 2:  # turn 2's visible tests: kill an actor mid-batch
                ray.kill(ray.get_actor(pool.actor_names()[0]))
            return pool.wait(handle)

        policy = ScriptedPolicy(first=SLOW_FIRST)
        _, scored = run(problems, policy, judge, cfg, n=2)
        stats = pool.stats()
    flat = [s for g in scored for s in g]
    assert stats["recreated"] == 1 and len(calls) >= 3
    # Every episode was judged at every turn, and solved by the feedback-reading second turn.
    assert all(t.judged for s in flat for t in s.sample.turns)
    assert [len(s.sample.turns) for s in flat] == [2] * len(flat)
    assert all(s.reward == 1.0 for s in flat)
    assert episode_metrics(flat)["env/unjudged"] == 0.0
