"""Sampled evaluation (`grpo eval --samples N --temperature T`): N completions per problem, one record per problem,
and per filter (GSM8K) or verifier (task) these figures, each over problems:

- mean@N: the average of each problem's fraction of right completions (the expected accuracy of one sampled
  completion), with a normal 95% interval over the per-problem fractions (stats.mean_interval);
- pass@N: the share of problems with at least one right completion, with a Wilson interval;
- maj@N: each problem's most common extracted answer, scored as one answer, with a Wilson interval. Answers a filter
  could not extract do not vote; a tie goes to the answer seen first. GSM8K's filters extract numbers; the task
  protocol's verifiers return a score, not the answer they read, so it has no maj@N (said, not invented);
- pass@k for k = 1, 2, 4, ... below N: the unbiased estimator (stats.pass_at_k), averaged over problems.

A problem's record is written once all N of its completions are scored: an interrupted evaluation redoes only the
problems it had not finished, with the same seeds (generation/sampling.py draws them). The settings and their
refusals (an absurd N, N without a temperature) are checked before anything loads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from grpo_cli.errors import UserError
from grpo_cli.eval.scoring import summarize
from grpo_cli.eval.stats import mean_interval, paired_difference, paired_mean_difference, pass_at_k, wilson_interval
from grpo_cli.generation.base import Generated
from grpo_cli.generation.sampling import Sampling
from grpo_cli.recipe.eval_section import EvalSection
from rewards.answers import to_number
from rewards.gsm8k_task import LM_EVAL_FALLBACK, lm_eval_normalize

MEAN_INTERVAL = "normal over the per-problem fractions"
NO_MAJORITY = "not available: the task's verifiers return a score, not the answer they read"


def repeated(prompts: list, problems: list, sampling: Sampling) -> tuple[list, list[int]]:
    """Each problem's prompt N times (prompt k*N + j is sample j of problem k), and each completion's seed."""
    n = sampling.samples
    seeds = [sampling.seed_of(problem.index, j) for problem in problems for j in range(n)]
    return [prompt for prompt in prompts for _ in range(n)], seeds


@dataclass
class ProblemSamples:
    index: int  # the problem's position in the caller's list
    samples: list[Generated]

    @property
    def new_tokens(self) -> int:
        return sum(s.new_tokens for s in self.samples)

    @property
    def model_tokens(self) -> int:
        return sum(s.model_tokens for s in self.samples)


def by_problem(stream, samples: int) -> Iterator[list[ProblemSamples]]:
    """The completions of `repeated` prompts, grouped by problem: a problem is yielded once all its samples are."""
    pending: dict[int, list[Generated | None]] = {}
    for batch in stream:
        done = []
        for item in batch:
            problem, sample = divmod(item.index, samples)
            slots = pending.setdefault(problem, [None] * samples)
            slots[sample] = item
            if all(slot is not None for slot in slots):
                done.append(ProblemSamples(problem, pending.pop(problem)))
        if done:
            yield done


def vote_key(protocol: str, value: Any) -> Any:
    """What makes two extracted answers one vote (None: no vote): lm-eval's normalised string under `lm-eval`, the
    number under `chat` ('18', '18.0' and '$18' are one answer, as they are one to its scoring)."""
    if not isinstance(value, str):
        return None
    if protocol == "lm-eval":
        return None if value == LM_EVAL_FALLBACK else lm_eval_normalize(value)
    return to_number(value)


def majority_vote(answers: list, keys: list, correct: list[bool]) -> dict[str, Any]:
    """The most common answer by `keys` (None does not vote; a tie goes to the first seen), scored as one answer:
    the verdict of its first occurrence, as an answer with that key is scored alike wherever it occurs."""
    counts = Counter(key for key in keys if key is not None)
    if not counts:
        return {"answer": None, "votes": 0, "correct": False}
    top = max(counts.values())
    first = next(i for i, key in enumerate(keys) if key is not None and counts[key] == top)
    return {"answer": answers[first], "votes": top, "correct": bool(correct[first])}


def sampled_record(problem, samples: list[Generated], verdicts: list[dict[str, Any]], protocol: str) -> dict:
    """One problem as predictions.jsonl stores it: its N completions, each scored, then per filter the fraction
    right (`correct`), whether any is right (`passed`) and the majority answer (None under `task`)."""
    names, n = list(verdicts[0]["correct"]), len(verdicts)
    formatted = [v["formatted"] for v in verdicts]
    majority = None
    if protocol != "task":
        majority = {
            name: majority_vote(
                [v["extracted"][name] for v in verdicts],
                [vote_key(protocol, v["extracted"][name]) for v in verdicts],
                [v["correct"][name] for v in verdicts],
            )
            for name in names
        }
    return {
        "index": problem.index,
        "question": problem.question,
        "gold": problem.gold,
        "samples": [{"completion": s.text, **v, "new_tokens": s.new_tokens} for s, v in zip(samples, verdicts)],
        "correct": {name: sum(bool(v["correct"][name]) for v in verdicts) / n for name in names},
        "passed": {name: any(bool(v["correct"][name]) for v in verdicts) for name in names},
        "majority": majority,
        "formatted": None if None in formatted else sum(map(bool, formatted)) / n,
    }


def completions_of(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every scored completion: a sampled record's samples, a greedy record itself."""
    return [c for r in records for c in (r["samples"] if "samples" in r else [r])]


def right_of(record: dict[str, Any], name: str) -> int:
    return sum(bool(s["correct"][name]) for s in record["samples"])


def summarize_sampled(
    records: list[dict[str, Any]], sampling: Sampling, protocol: str, names, wall_s, new_problems, new_tokens, budget
) -> dict[str, Any]:
    """summary.json's figures: mean@N as each filter's `accuracy` (with `ci95`), then `pass`, `majority` and
    `pass_at_k`; format rate, length and cut share over all completions."""
    completions = completions_of(records)
    flat = summarize(completions, wall_s, new_problems, new_tokens, budget, names)  # behaviour and session
    filters = {name: _figures(records, name, sampling.samples, protocol) for name in names}
    for name in names:
        if "accuracy_well_formed" in flat["filters"][name]:  # among the well-formed completions
            filters[name]["accuracy_well_formed"] = flat["filters"][name]["accuracy_well_formed"]
    sampled = {
        **sampling.settings(),
        "mean_interval": MEAN_INTERVAL,
        **({"majority": NO_MAJORITY} if protocol == "task" else {}),
    }
    summary = {"problems": len(records), "completions": len(completions), "sampling": sampled, "filters": filters}
    summary.update((key, value) for key, value in flat.items() if key not in summary)  # format, length, session
    return summary


def _figures(records: list[dict[str, Any]], name: str, samples: int, protocol: str) -> dict[str, Any]:
    mean, low, high = mean_interval([right_of(r, name) / len(r["samples"]) for r in records])
    figures = {
        "accuracy": mean,  # mean@N
        "ci95": [low, high],
        "correct": sum(right_of(r, name) for r in records),
        "completions": sum(len(r["samples"]) for r in records),
        "pass": _share(sum(bool(r["passed"][name]) for r in records), len(records)),
        "majority": None,
        "pass_at_k": {
            str(k): sum(pass_at_k(len(r["samples"]), right_of(r, name), k) for r in records) / len(records)
            for k in (2**e for e in range(samples.bit_length()))
            if k < samples and records
        },
    }
    if protocol != "task":
        figures["majority"] = _share(sum(bool(r["majority"][name]["correct"]) for r in records), len(records))
    return figures


def _share(correct: int, total: int) -> dict[str, Any]:
    return {
        "accuracy": correct / total if total else 0.0,
        "correct": correct,
        "ci95": list(wilson_interval(correct, total)),
    }


def sampled_change(base: dict[int, dict], trained: dict[int, dict], common: list[int], name: str) -> dict[str, Any]:
    """`grpo eval compare` with samples: mean@N's change with a paired interval over the per-problem differences of
    fractions, then pass@N's (and maj@N's where there is one) with the paired interval over problems."""
    before = [right_of(base[i], name) / len(base[i]["samples"]) for i in common]
    after = [right_of(trained[i], name) / len(trained[i]["samples"]) for i in common]
    n = len(common)
    change = {"base": sum(before) / n if n else 0.0, "trained": sum(after) / n if n else 0.0}
    change.update(paired_mean_difference(before, after))
    votes = {"pass": lambda r: r["passed"][name]}
    if all(base[i]["majority"] is not None and trained[i]["majority"] is not None for i in common):
        votes["majority"] = lambda r: r["majority"][name]["correct"]
    for key, right in votes.items():
        b, a = [bool(right(base[i])) for i in common], [bool(right(trained[i])) for i in common]
        change[key] = {"base": sum(b) / n if n else 0.0, "trained": sum(a) / n if n else 0.0}
        change[key].update(paired_difference(b, a))
    return change


def sampling_of(ev: EvalSection) -> Sampling | None:
    """The evaluation's sampling, or None for greedy decoding (no temperature: today's one completion per problem)."""
    if ev.temperature is None:
        return None
    return Sampling(ev.samples or 1, ev.temperature, 1.0 if ev.top_p is None else ev.top_p, ev.seed or 0)


# A problem's N completions are held together until all are scored, and written as one line of predictions.jsonl;
# every prompt and seed is built before the first batch. Far past any N the figures need (pass@k's estimator is
# unbiased at any N), and small enough that the largest split's prompts fit in memory.
MAX_SAMPLES = 1024


def check_sampling(ev: EvalSection, uses_tools: bool) -> None:
    """Refusals before anything loads or is written, each naming the flag and the fix."""
    if (ev.samples or 1) > MAX_SAMPLES:
        raise UserError(
            f"--samples {ev.samples} (eval.samples) is more than the {MAX_SAMPLES} completions per problem an "
            f"evaluation holds; give --samples {MAX_SAMPLES} or fewer"
        )
    if ev.temperature is None and (ev.samples or 1) > 1:
        raise UserError(
            f"--samples {ev.samples} needs --temperature above 0 (eval.temperature): greedy decoding would write "
            f"the same completion {ev.samples} times; add e.g. --temperature 1.0, or leave out --samples"
        )
    if ev.temperature is None and ev.top_p not in (None, 1.0):
        raise UserError(f"eval.top_p {ev.top_p} applies to sampling only: add --temperature, or leave out eval.top_p")
    if ev.temperature is not None and uses_tools:
        raise UserError(
            "--temperature/--samples: the tool loop evaluates greedily only; leave out --samples and --temperature "
            "for this recipe"
        )
