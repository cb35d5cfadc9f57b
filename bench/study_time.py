"""The whole study's wall time on one GPU, modelled: per notebook, the requests and tokens of the
committed runs scaled to a profile's sizes (`study_workload.py`), times an engine's speed.

Why a model: no session has had a GPU long enough to run gpu-paper, and the choice it informs
(which engine gpu-paper serves with, what to move out of kgrag's own process) must be made before.

The engine model: a notebook's requests reach the engine `b` at a time, b = min(questions in flight,
the engine's largest batch) (a question's requests form a dependent chain, so one per question is in
flight; extraction chunks are independent but kgrag caps them at the same in-flight count). Its time
is prompt tokens / prefill tokens/s at b + completion tokens x padding / decode tokens/s at b (both
aggregate over the batch; levels between measured batches are interpolated linearly, beyond the
largest one held flat). A continuous-batching server (vLLM) admits a request as soon as another
ends: padding 1. `hf:` decodes a batch until its longest request ends: padding = E[longest of b] /
E[one], from the committed completion lengths. The client's own CPU per question (one Python
process) runs beside the engine: a notebook takes the longer of the two. DPO training (27) is priced
per pair; a gpu-paper-data build adds the doctor's first-run hours of embedding and indexing.

    .venv/bin/python bench/study_time.py                          # gpu-paper, the stated speeds
    .venv/bin/python bench/study_time.py --measured results/reference/gpu-day/gpu_day_check.json
    .venv/bin/python bench/study_time.py --write-doc docs/GPU.md  # the table in docs/GPU.md

Every speed is either measured (`--measured`: `scripts/gpu_day_check.py`'s JSON) or one of the
stated presets below, each with its source.
"""

from __future__ import annotations

import argparse
import json
import sys
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import study_workload as sw  # noqa: E402

GOAL_HOURS = 8.0
DOC_BEGIN, DOC_END = "<!-- study_time: begin -->", "<!-- study_time: end -->"


@dataclass(frozen=True)
class EngineSpeed:
    """Prefill and decode tokens/s (aggregate over the batch) at each batch size of one engine."""

    name: str
    source: str
    levels: tuple[tuple[int, float, float], ...]   # (batch, prefill tok/s, decode tok/s), batch ascending
    max_batch: int
    continuous: bool          # continuous batching (a server) vs a batch decoded to its longest (hf:)

    def at(self, b: int) -> tuple[float, float]:
        """(prefill, decode) tokens/s with `b` requests in the batch."""
        b = max(1, min(b, self.max_batch))
        xs = [lv[0] for lv in self.levels]
        if b <= xs[0]:
            return self.levels[0][1], self.levels[0][2]
        if b >= xs[-1]:
            return self.levels[-1][1], self.levels[-1][2]
        i = bisect_left(xs, b)
        (x0, p0, d0), (x1, p1, d1) = self.levels[i - 1], self.levels[i]
        t = (b - x0) / (x1 - x0)
        return p0 + t * (p1 - p0), d0 + t * (d1 - d0)


def _flat_step(name: str, source: str, step_ms: float, max_batch: int, prefill: float, continuous: bool,
               batches=(1, 8, 32, 64)) -> EngineSpeed:
    """An engine whose decoding step costs the same up to `max_batch` sequences (memory-bound decoding)."""
    return EngineSpeed(name, source, tuple((b, prefill, b * 1000.0 / step_ms) for b in batches if b <= max_batch),
                       max_batch, continuous)


# Stated speeds. Each says where it comes from; none is a measurement of this project on an H100.
PRESETS = {
    "vllm-a100-modelled": _flat_step(
        "vllm-a100-modelled", "bench/batching_server.py's defaults: an 8B model in bf16 under vLLM on one A100-40GB "
        "(published: ~75 tok/s for one request, 6.6x at 8), 13.3 ms per step flat up to 64, prefill 10,000 tok/s",
        13.3, 64, 10_000.0, True),
    "vllm-h100-stated": EngineSpeed(
        "vllm-h100-stated", "7.6B bf16 on one H100 SXM: one request at the memory roofline (15.2 GB of weights "
        "per step / 3.35 TB/s at 70% = 6.5 ms, 154 tok/s), saturated ~12,500 tok/s (a published third-party "
        "figure, in the project's design notes of 2026-11-25), prefill 2 x 7.6e9 FLOP per token at 40% of 989 TFLOP/s = 26,000 tok/s",
        ((1, 26_000.0, 154.0), (8, 26_000.0, 1_230.0), (32, 26_000.0, 4_900.0), (64, 26_000.0, 12_500.0)), 64, True),
    "hf-quarter-of-vllm": _flat_step(
        "hf-quarter-of-vllm", "issue 58's guess for transformers in-process: a quarter of vllm-a100-modelled's "
        "speed (53.2 ms per step, prefill 2,500 tok/s), batches of at most 8 (the hf backend's batch_size)",
        53.2, 8, 2_500.0, False, batches=(1, 8)),
}
DEFAULT_SERVED, DEFAULT_HF = "vllm-h100-stated", "hf-quarter-of-vllm"

# Client CPU seconds per question-run, one process (the GIL): docs/PERFORMANCE.md, Serving (a), the
# middle of each measured range (2026-11-25, 2 cores): LLM only 3-23 ms, KG-RAG 84-168 ms (one
# embedding and a full-KB dot product per sub-question; LLM-KG and LLM-QD taken as KG-RAG),
# KG-Infused RAG 55-90 ms. SA-RAG and TCR-QF were not measured: KG-Infused RAG's figure stands in.
CLIENT_CPU_S = {"llm": 0.013, "metaqa": 0.126, "other": 0.0725}


def client_cpu_s(u: sw.Unit) -> float:
    if u.notebook[:1] in "01":
        return CLIENT_CPU_S["llm"] if u.config == "llm" else CLIENT_CPU_S["metaqa"]
    return CLIENT_CPU_S["other"]


# DPO training, per preference pair (27, gpu-paper: bf16 LoRA, gradient checkpointing): 10 forward-
# equivalents of 2 x 7.6e9 FLOP per token (policy chosen + rejected: forward, backward = 2, recompute
# = 1; reference chosen + rejected: forward) over 2 x 1,500 tokens, at 40% of an H100's 989 TFLOP/s.
DPO_STATED = {"seconds_per_pair": 10 * 2 * 7.6e9 * 2 * 1_500 / (0.40 * 989e12), "tokens_per_pair": 2 * 1_500,
              "source": "stated: 10 forward-equivalents x 2 x 7.6e9 FLOP/token x 3,000 tokens at 40% of 989 TFLOP/s"}


@dataclass(frozen=True)
class Setup:
    """One way to run the study: which engine answers what, at how many questions in flight."""

    label: str
    served: EngineSpeed | None     # None: every unit in-process
    hf: EngineSpeed
    in_flight: int
    in_process_units: bool = True  # units marked in_process stay on hf: even with a server (today's code)


def padding(engine: EngineSpeed, b: int, groups: tuple[tuple[int, ...], ...]) -> float:
    """Decoding steps of batches of `b` decoded to their longest, over those of the requests alone: per
    group of like requests (sorted lengths), E[longest of b] / E[one], weighted by the group's tokens;
    1 for a continuous-batching server."""
    if engine.continuous or b <= 1 or not groups:
        return 1.0
    steps = tokens = 0.0
    for g in groups:
        n, total = len(g), sum(g)
        if not total:
            continue
        e_max = sum(x * (((i + 1) / n) ** b - (i / n) ** b) for i, x in enumerate(g))
        steps += e_max / (total / n) * total
        tokens += total
    return steps / tokens if tokens else 1.0


def engine_seconds(engine: EngineSpeed, prompt: float, completion: float, in_flight: int,
                   lengths: tuple[tuple[int, ...], ...]) -> float:
    b = min(in_flight, engine.max_batch)
    prefill, decode = engine.at(b)
    return prompt / prefill + completion * padding(engine, b, lengths) / decode


@dataclass
class NotebookTime:
    notebook: str
    question_runs: int
    requests: float
    prompt_tokens: float
    completion_tokens: float
    served_s: float = 0.0
    in_process_s: float = 0.0
    client_s: float = 0.0

    @property
    def wall_s(self) -> float:
        return max(self.served_s + self.in_process_s, self.client_s)


def notebook_times(wl: sw.StudyWorkload, setup: Setup, lengths: tuple[tuple[int, ...], ...],
                   client_efficiency: float = 1.0) -> list[NotebookTime]:
    out = []
    for nb, priced in wl.notebooks.items():
        t = NotebookTime(nb, sum(p.unit.question_runs for p in priced), sum(p.requests for p in priced),
                         sum(p.prompt_tokens for p in priced), sum(p.completion_tokens for p in priced))
        for p in priced:
            t.client_s += p.unit.question_runs * client_cpu_s(p.unit)
            if p.replayed:
                continue
            on_hf = setup.served is None or (p.unit.in_process and setup.in_process_units)
            engine = setup.hf if on_hf else setup.served
            secs = engine_seconds(engine, p.prompt_tokens, p.completion_tokens, setup.in_flight, lengths)
            if on_hf:
                t.in_process_s += secs
            else:
                t.served_s += secs / client_efficiency
        out.append(t)
    return out


@dataclass
class StudyTime:
    setup: Setup
    notebooks: list[NotebookTime]
    dpo_s: float
    data_build_s: float

    @property
    def served_h(self) -> float:
        return sum(t.served_s for t in self.notebooks) / 3600

    @property
    def in_process_h(self) -> float:
        return sum(t.in_process_s for t in self.notebooks) / 3600

    @property
    def client_h(self) -> float:
        return sum(t.client_s for t in self.notebooks) / 3600

    @property
    def total_h(self) -> float:
        return (sum(t.wall_s for t in self.notebooks) + self.dpo_s + self.data_build_s) / 3600


def dpo_pairs(profile: str) -> int:
    """Pairs notebook 27 trains on: 26's inputs (questions x rounds) x the committed share that gave a pair."""
    from kgrag_lib.studies import notebook_settings

    s = notebook_settings("26_dpo_data", profile)
    rows = {r.get("row"): r for r in json.loads((sw.REFERENCE / "26_dpo_data" / "summary.json").read_text())
            if r.get("table") == "Table 19"}
    share = rows["pairs"]["D_KA"] / rows["inputs"]["D_KA"]
    return round(s.n_questions * len(s.rounds) * share)


def data_build_hours(profile: str) -> float:
    """The doctor's first-run hours of the papers' resources a profile names (gpu-paper-data: Wikipedia, Wikidata5M)."""
    from kgrag_lib.doctor.plan import PAPER_DATA, data_needs

    return sum(PAPER_DATA[d.name]["first_run_hours"] for d in data_needs(_profile(profile), lambda name: True))


def _profile(profile: str) -> dict:
    from kgrag_lib.studies import load_profile

    return load_profile(profile)


def model(profile: str, setups: list[Setup], *, measured: dict | None = None,
          wl: sw.StudyWorkload | None = None) -> tuple[sw.StudyWorkload, list[StudyTime], dict]:
    """The workload and each set-up's times, plus the inputs they used (for the doc)."""
    wl = wl or sw.study_workload(profile)
    lengths, _ = sw.completion_lengths()
    dpo = dict(DPO_STATED)
    efficiency = {}
    if measured:
        if measured.get("dpo", {}).get("seconds_per_pair"):
            d = measured["dpo"]
            dpo = {"seconds_per_pair": d["seconds_per_pair"] * DPO_STATED["tokens_per_pair"] / d["tokens_per_pair"],
                   "tokens_per_pair": DPO_STATED["tokens_per_pair"],
                   "source": f"measured ({measured.get('device')}), {d['tokens_per_pair']} tokens per pair, "
                             f"scaled to {DPO_STATED['tokens_per_pair']}"}
        efficiency = {int(r["in_flight"]): r["kgrag_over_plain"] for r in measured.get("client", {}).get("levels", [])
                      if r.get("kgrag_over_plain")}
    pairs = dpo_pairs(profile) if "27_dpo_training" in wl.notebooks else 0
    dpo_s = pairs * dpo["seconds_per_pair"]
    build_s = data_build_hours(profile) * 3600
    out = [StudyTime(s, notebook_times(wl, s, lengths, efficiency.get(s.in_flight, 1.0)), dpo_s, build_s)
           for s in setups]
    inputs = {"dpo_pairs": pairs, "dpo": dpo, "data_build_h": build_s / 3600, "client_efficiency": efficiency,
              "capped_share": wl.capped_share, "completion_lengths": sum(map(len, lengths)),
              "padding_at_hf_batch": {s.hf.name: round(padding(s.hf, s.hf.max_batch, lengths), 2) for s in setups}}
    return wl, out, inputs


def default_setups(served: EngineSpeed, hf: EngineSpeed, in_flight: int = 32, hf_in_flight: int = 8) -> list[Setup]:
    return [
        Setup(f"as shipped: `hf:` everywhere, {hf_in_flight} in flight", None, hf, hf_in_flight),
        Setup(f"`--model vllm-serve:...`, {in_flight} in flight (27's +DPO rows and 28's Self-RAG in-process)",
              served, hf, in_flight),
        Setup(f"`vllm-serve:` for every request (issue 58 items 1-2), {in_flight} in flight", served, hf, in_flight,
              in_process_units=False),
    ]


def speed_from_measured(measured: dict, max_batch: int) -> EngineSpeed:
    """`hf:` speed from the device check's `hf_throughput` levels."""
    hf = measured.get("hf_throughput") or {}
    levels = tuple(sorted((int(r["batch"]), float(r["prefill_tok_s"]), float(r["decode_tok_s"]))
                          for r in hf.get("levels", []) if r.get("decode_tok_s")))
    if not levels:
        raise ValueError("the measured JSON has no hf_throughput.levels with decode_tok_s: "
                         "expected scripts/gpu_day_check.py's output")
    return EngineSpeed(f"hf-measured ({measured.get('device', '?')})",
                       f"scripts/gpu_day_check.py on {measured.get('device', '?')}, {measured.get('date', '?')}"
                       + (" (--tiny: a tiny model, not a 7B)" if measured.get("tiny") else ""),
                       levels, max_batch, False)


# ---- printing -----------------------------------------------------------------------------------------
def _h(x: float) -> str:
    return f"{x:.1f}"


def render(profile: str, wl: sw.StudyWorkload, times: list[StudyTime], inputs: dict) -> str:
    """Markdown: the set-ups, the goal line, the notebooks, the inputs."""
    lines = [f"**{profile}**, modelled (`bench/study_time.py`; hours on one GPU):", "",
             "| set-up | served | in-process | DPO training | client CPU | total |", "|---|---|---|---|---|---|"]
    for t in times:
        lines.append(f"| {t.setup.label} | {_h(t.served_h)} | {_h(t.in_process_h)} | {_h(t.dpo_s / 3600)} | "
                     f"{_h(t.client_h)} | **{_h(t.total_h)}** |")
    best = min(times, key=lambda t: t.total_h)
    verdict = "met" if best.total_h <= GOAL_HOURS else "NOT met"
    engines = ", ".join(f"`{n}`" for n in dict.fromkeys(
        [t.setup.served.name for t in times if t.setup.served] + [t.setup.hf.name for t in times]))
    lines += ["", f"Goal, {profile} <= {GOAL_HOURS:.0f} h on one H100: at the speeds {engines} the fastest set-up "
                  f"takes {_h(best.total_h)} h ({best.setup.label}): **{verdict}**."
              + (f" Data build (first run) included: {_h(inputs['data_build_h'])} h." if inputs["data_build_h"] else ""),
              "", "| notebook | question-runs | requests | prompt Mtok | completion Mtok | "
              + " | ".join(f"set-up {i + 1} h" for i in range(len(times))) + " |",
              "|---|---|---|---|---|" + "---|" * len(times)]
    for i, nb in enumerate(wl.notebooks):
        row = times[0].notebooks[i]
        lines.append(f"| {nb} | {row.question_runs:,} | {row.requests:,.0f} | {row.prompt_tokens / 1e6:.1f} | "
                     f"{row.completion_tokens / 1e6:.2f} | "
                     + " | ".join(_h(t.notebooks[i].wall_s / 3600) for t in times) + " |")
    speeds = {t.setup.hf.name: t.setup.hf for t in times} | {t.setup.served.name: t.setup.served for t in times
                                                            if t.setup.served}
    lines += ["", "Inputs:", ""]
    lines += [f"- speed `{s.name}`: {s.source}" for s in speeds.values()]
    lines += [f"- requests and tokens: the committed runs under `results/reference/` (per-question `cost` of "
              f"every `questions.jsonl`, notebooks 30 and 40's `summary.json`), every request counted, whole runs "
              f"that an earlier notebook made counted once (`bench/study_workload.py`); completions as the "
              f"committed 0.5B model wrote them ({100 * inputs['capped_share']:.1f}% of its "
              f"{inputs['completion_lengths']:,} cached requests stopped at their cap)",
              "- `hf:` batches decoded to their longest request: "
              + ", ".join(f"{k} {v}x" for k, v in inputs["padding_at_hf_batch"].items()) + " the "
              "decoding steps of continuous batching at the largest batch (like requests grouped by their "
              "sampling parameters, from the committed cache's completion lengths)",
              f"- client CPU per question-run, one process: MetaQA LLM only {CLIENT_CPU_S['llm'] * 1000:.0f} ms, "
              f"MetaQA with the KG {CLIENT_CPU_S['metaqa'] * 1000:.0f} ms, every other method "
              f"{CLIENT_CPU_S['other'] * 1000:.1f} ms (docs/PERFORMANCE.md, Serving (a): the middle of each "
              "measured range; SA-RAG and TCR-QF unmeasured, KG-Infused RAG's figure stands in); a notebook "
              "takes the longer of its engine time and its client time",
              f"- DPO training: {inputs['dpo_pairs']:,} pairs x {inputs['dpo']['seconds_per_pair']:.2f} s "
              f"({inputs['dpo']['source']})"]
    if inputs["client_efficiency"]:
        lines.append(f"- kgrag / plain client per in-flight level (measured): {inputs['client_efficiency']}")
    return "\n".join(lines) + "\n"


def write_doc(path: Path, text: str) -> None:
    doc = path.read_text()
    if DOC_BEGIN not in doc or DOC_END not in doc:
        raise SystemExit(f"{path}: no {DOC_BEGIN} ... {DOC_END} block to replace; add the two markers first")
    head, rest = doc.split(DOC_BEGIN, 1)
    _, tail = rest.split(DOC_END, 1)
    path.write_text(f"{head}{DOC_BEGIN}\n{text}{DOC_END}{tail}")


def doc_block(path: Path) -> str:
    doc = path.read_text()
    return doc.split(DOC_BEGIN, 1)[1].split(DOC_END, 1)[0].lstrip("\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="gpu-paper", help="the profile whose sizes the study runs at")
    ap.add_argument("--served", default=DEFAULT_SERVED, help=f"server speed preset: {', '.join(PRESETS)}")
    ap.add_argument("--hf", default=DEFAULT_HF, help="in-process speed preset (replaced by --measured's hf levels)")
    ap.add_argument("--measured", type=Path, help="scripts/gpu_day_check.py's JSON: hf speed, DPO step, client")
    ap.add_argument("--in-flight", type=int, default=32, help="questions in flight with a server")
    ap.add_argument("--hf-in-flight", type=int, default=8, help="questions in flight in the as-shipped set-up")
    ap.add_argument("--hf-batch", type=int, default=8, help="largest batch of the hf backend (its batch_size)")
    ap.add_argument("--write-doc", type=Path, help="replace the study_time block of this markdown file")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON")
    a = ap.parse_args(argv)
    for name in (a.served, a.hf):
        if name not in PRESETS:
            ap.error(f"unknown speed preset {name!r}; expected one of {', '.join(PRESETS)}")
    measured = None
    hf = PRESETS[a.hf]
    if a.measured:
        measured = json.loads(a.measured.read_text())
        hf = speed_from_measured(measured, a.hf_batch)
    setups = default_setups(PRESETS[a.served], hf, a.in_flight, a.hf_in_flight)
    wl, times, inputs = model(a.profile, setups, measured=measured)
    text = render(a.profile, wl, times, inputs)
    print(text)
    if a.write_doc:
        write_doc(a.write_doc, text)
    if a.json:
        a.json.write_text(json.dumps({"profile": a.profile, "inputs": inputs, "setups": [
            {"label": t.setup.label, "served_h": t.served_h, "in_process_h": t.in_process_h, "dpo_h": t.dpo_s / 3600,
             "client_h": t.client_h, "total_h": t.total_h} for t in times]}, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
