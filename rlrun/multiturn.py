"""Multi-turn rollouts (`env.name`): every trajectory of a batch advances one turn at a time.

The first turn is the single-turn rollout itself (the step's `generate`, same prompts, same
seeds). Then, while any trajectory is active, one turn for all of them together:

1. each trajectory's environment says what the sandbox must run for its latest response; the
   submissions of every active trajectory go to the sandbox pool in one call;
2. each environment answers with a `Feedback`; a trajectory ends when its environment says
   done, when it has had `env.max_turns` turns, or when its observation and one more full turn
   (`rollout.sampling.max_new_tokens`) would not fit in `env.max_tokens`;
3. the others continue: the observation becomes token ids in the model's chat format (a user
   turn, then the assistant's header; plain text models get it between newlines) appended to
   the trajectory's token ids, and the rollout actors continue every trajectory from its ids
   (the engines' `extend`). Earlier turns are never re-templated or re-tokenized: the learner
   trains on exactly the ids the engines saw.

A trajectory is one `Sample`: `response_ids` holds every turn and observation in order;
`env_mask` is 0 on observation tokens, whose behaviour log-probs are 0 (they were not sampled);
`token_versions` give every token's weight version (an observation takes its turn's);
`turns` records each turn's text, observation and where it ends; `response_text` is the last
turn's text, which the reward scores against the environment's `scored_problem()`.
A trajectory with a turn its environment could not judge (a sandbox failure) gets no score,
so it stays out of its group's baseline (`rlrun.rewards.reward`'s unscored rule).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from rlrun.config import Config
from rlrun.engines.base import SamplingParams
from rlrun.environments.base import Environment, Feedback
from rlrun.records import Problem, Sample, ScoredSample, TokenReward, Turn
from rlrun.rewards.code import JudgeFn
from rlrun.scoring import ScoreFn, regroup

# extend(samples, sampling) -> each sample continued (rlrun.engines.base.Engine.extend)
ExtendFn = Callable[[list[Sample], SamplingParams], list[Sample]]
# Turn t (from 1) samples with the first turn's seed plus this times t.
TURN_SEED_OFFSET = 700_001
_ASSISTANT, _OBSERVATION = "rlrun-assistant-turn", "rlrun-observation"


class ObservationTokens:
    """Token ids of an observation as the next user turn, in the model's chat format."""

    def __init__(self, tokenizer: Any, chat: bool) -> None:
        self.tokenizer = tokenizer
        self.head, self.tail = _chat_frame(tokenizer) if chat else ("\n", "\n")
        # The frame around every observation: tokenized once, not per turn.
        self.head_ids, self.tail_ids = self._tokens(self.head), self._tokens(self.tail)

    def frame(self, observation: str) -> str:
        """`observation` as the text of a user turn after a model turn."""
        return self.head + observation + self.tail

    def ids(self, observation: str, last_token: int | None) -> list[int]:
        """`frame` as token ids, after a model turn whose last token is `last_token`. A turn
        that ended with the frame's first token (the template's end-of-turn token, or a plain
        frame's newline) gets no second one; a turn cut off on a token that only spells the
        start of it (`<` of `<|im_end|>`) still gets the whole token. The observation quotes
        the program's output, so its text is tokenized as text: a program that prints
        `<|im_end|>` or `</s>` gets those characters into the model's context, not the control
        tokens, which would end the user turn or start a fake one."""
        head = self.head_ids
        if last_token is not None and head[:1] == [last_token]:
            head = head[1:]
        return head + self._tokens(observation, split_special_tokens=True) + self.tail_ids

    def _tokens(self, text: str, **kwargs: Any) -> list[int]:
        if not text:
            return []
        return list(self.tokenizer(text, add_special_tokens=False, **kwargs)["input_ids"])


def _chat_frame(tokenizer: Any) -> tuple[str, str]:
    """The template's text between an assistant turn's content and a user message's content,
    and after the user content up to the next assistant turn's content."""
    user = {"role": "user", "content": "q"}
    one = tokenizer.apply_chat_template(
        [user, {"role": "assistant", "content": _ASSISTANT}], tokenize=False)
    two = tokenizer.apply_chat_template(
        [user, {"role": "assistant", "content": _ASSISTANT},
         {"role": "user", "content": _OBSERVATION}], tokenize=False, add_generation_prompt=True)
    cut = one.index(_ASSISTANT) + len(_ASSISTANT)
    if not two.startswith(one[:cut]) or _OBSERVATION not in two[cut:]:
        raise ValueError("the tokenizer's chat template renders an earlier assistant turn "
                         "differently once a user turn follows it; set model.chat_template=false "
                         "for multi-turn environments with this model")
    head, tail = two[cut:].split(_OBSERVATION, 1)
    return head, tail


@dataclass
class Trajectory:
    """One episode as it grows."""

    env: Environment
    sample: Sample  # the trajectory so far (the first turn's sample, then grown)
    turns: list[Turn] = field(default_factory=list)
    done: bool = False
    pending: list[int] = field(default_factory=list)  # the observation ids the next turn follows

    def add(self, turn: Sample, observation_ids: list[int]) -> None:
        """The previous turn's observation (`observation_ids`) and then `turn`."""
        s, version = self.sample, self.sample.versions()[-1] if self.sample.response_ids else 0
        ids = observation_ids + turn.response_ids
        self.sample = dataclasses.replace(
            s,
            response_ids=s.response_ids + ids,
            behaviour_logprobs=s.behaviour_logprobs + [0.0] * len(observation_ids)
            + turn.behaviour_logprobs,
            env_mask=(s.env_mask or [1] * len(s.response_ids)) + [0] * len(observation_ids)
            + [1] * len(turn.response_ids),
            token_versions=s.versions() + [version] * len(observation_ids) + turn.versions(),
            response_text=turn.response_text,
            finish_reason=turn.finish_reason,
            engine=s.engine if turn.engine == s.engine else -1,
        )
        self.turns.append(Turn(turn.response_text, len(self.sample.response_ids)))

    def answer(self, feedback: Feedback, observation_ids: list[int], go_on: bool) -> None:
        """Record the environment's answer to the latest turn; the episode goes on only if
        the environment did not end it, could judge it, and `go_on` (turns and tokens left)."""
        turn = self.turns[-1]
        turn.done, turn.judged = feedback.done, feedback.judged
        turn.reward, turn.info = feedback.reward, dict(feedback.info)
        self.done = feedback.done or not feedback.judged or not go_on
        if not self.done:
            turn.observation, self.pending = feedback.observation, observation_ids

    def finished(self) -> Sample:
        return dataclasses.replace(self.sample, turns=self.turns,
                                   token_versions=self.sample.compact(self.sample.versions()))


class Episodes:
    """Runs the turns after the first (`__call__`) and scores trajectories (`score`)."""

    def __init__(self, env_cls: type[Environment], cfg: Config, tokens: ObservationTokens,
                 extend: ExtendFn, judge: JudgeFn | None) -> None:
        self.env_cls, self.cfg, self.tokens = env_cls, cfg, tokens
        self.extend, self.judge = extend, judge

    def __call__(self, problems: list[Problem], groups: list[list[Sample]],
                 sampling: SamplingParams) -> list[list[Sample]]:
        """The trajectories whose first turns are `groups[i]` (answers to `problems[i]`)."""
        env, turn_tokens = self.cfg.env, sampling.max_new_tokens
        everyone = [Trajectory(self.env_cls(p, self.cfg), dataclasses.replace(
                        s, response_ids=[], behaviour_logprobs=[], token_versions=[]))
                    for p, group in zip(problems, groups, strict=True) for s in group]
        for t, first in zip(everyone, [s for group in groups for s in group], strict=True):
            t.add(first, [])
        for turn in range(1, env.max_turns + 1):
            active = [t for t in everyone if not t.done]
            for t, feedback in zip(active, self._feedback(active), strict=True):
                ids = t.sample.response_ids
                observation = self.tokens.ids(feedback.observation, ids[-1] if ids else None)
                fits = len(ids) + len(observation) + turn_tokens <= env.max_tokens
                t.answer(feedback, observation, turn < env.max_turns and fits)
            going = [t for t in active if not t.done]
            if not going:
                break
            requests = [dataclasses.replace(
                t.sample, prompt_ids=t.sample.prompt_ids + t.sample.response_ids + t.pending,
                response_ids=[], behaviour_logprobs=[], token_versions=[], response_text="",
                env_mask=[], turns=[]) for t in going]
            seed = None if sampling.seed is None else sampling.seed + TURN_SEED_OFFSET * turn
            answers = self.extend(requests, dataclasses.replace(sampling, n=1, seed=seed,
                                                                round_tokens=None))
            for t, answer in zip(going, answers, strict=True):
                t.add(answer, t.pending)
        return [[t.finished() for t in run] for run in regroup(everyone, map(len, groups))]

    def _feedback(self, active: list[Trajectory]) -> list[Feedback]:
        """Every active trajectory's environment answers its latest turn; the sandbox runs
        all their submissions in one call."""
        wanted = [t.env.submissions(t.turns[-1].response) for t in active]
        flat = [s for subs in wanted for s in subs]
        if flat and self.judge is None:
            raise RuntimeError(f"env.name={self.cfg.env.name} submitted programs but the run "
                               "has no sandbox (it starts one only for data with code problems)")
        results = self.judge(flat) if flat and self.judge is not None else []
        return [t.env.observe(t.turns[-1].response, got) for t, got
                in zip(active, regroup(results, map(len, wanted)), strict=True)]

    def score(self, score: ScoreFn) -> ScoreFn:
        """`score` applied to trajectories: each final response against its environment's
        `scored_problem()`; no score when a turn could not be judged; `env.turn_cost` per extra
        turn; with `env.turn_rewards`, each turn's reward at its last token."""
        env = self.cfg.env

        def scored(problems: list[Problem], samples: list[Sample]) -> list[ScoredSample]:
            targets = [self.env_cls(p, self.cfg).scored_problem() for p in problems]
            out = score(targets, samples)
            for s in out:
                turns = s.sample.turns
                if not all(t.judged for t in turns):
                    s.reward = None
                elif s.reward is not None and turns:
                    s.reward -= env.turn_cost * (len(turns) - 1)
                if env.turn_rewards:
                    s.token_rewards = sorted(
                        s.token_rewards + [TokenReward(t.end - 1, t.reward) for t in turns
                                           if t.reward is not None],
                        key=lambda r: r.position)
            return out

        return scored


def solved(scored: ScoredSample, component: str = "correctness") -> bool:
    """The final program is correct (its `component` is 1)."""
    return scored.components.get(component) == 1.0


def episode_metrics(scored: list[ScoredSample]) -> dict[str, float]:
    """env/* of a batch of trajectories: turns used, accuracy after the first and the last
    turn, the fix rate (share of trajectories whose first turn was not solved that end solved),
    final programs the environment accepted but the reward did not (`env/visible_only`, the
    feedback-gaming signal), unjudged trajectories, and the mean of each `Turn.info` key."""
    if not scored or not scored[0].sample.turns:
        return {}
    first = [len(s.sample.turns) == 1 and solved(s) for s in scored]
    retried = [s for s, ok in zip(scored, first, strict=True) if not ok]
    info: dict[str, list[float]] = {}
    for s in scored:
        for t in s.sample.turns:
            for key, value in t.info.items():
                info.setdefault(key, []).append(value)
    return {
        "env/turns": fmean(len(s.sample.turns) for s in scored),
        "env/solved_first_turn": fmean(first),
        "env/solved": fmean(solved(s) for s in scored),
        "env/fix_rate": fmean(solved(s) for s in retried) if retried else 0.0,
        "env/visible_only": fmean(s.sample.turns[-1].info.get("visible_passed") == 1.0
                                  and not solved(s) for s in scored),
        "env/unjudged": float(sum(not all(t.judged for t in s.sample.turns) for s in scored)),
    } | {f"env/{key}": fmean(values) for key, values in sorted(info.items())}
