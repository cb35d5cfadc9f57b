"""A loopback OpenAI-compatible server that models a continuous-batching GPU engine.

Not a model of text: a model of time. Each decoding step advances every admitted sequence by
one token and costs `step_ms`, flat up to `max_batch` sequences (what vLLM / SGLang achieve on
a GPU while memory-bandwidth bound); a sequence admitted in a step adds its prefill
(`prefill_tok_per_s`). Requests beyond `max_batch` wait for a free slot. The completion is a
deterministic string of words taken from the prompt, `min(max_tokens, 8 + hash % 40)` tokens
long, so a client's pipeline runs its usual number of calls.

Default parameters stand for an 8B model in bf16 under vLLM on one A100-40GB: about 75
generated tokens/s for one request (13.3 ms per step), published figures of 6.6x at 8
concurrent requests and saturation in the thousands of tokens/s, hence a flat step up to 64
sequences (4,800 tok/s) and prefill at 10,000 tokens/s. `time_scale` shrinks every latency
for a quicker look; the bench runs at 1.

    .venv/bin/python bench/batching_server.py --port 8011       # serve until killed
"""



import argparse
import asyncio
import hashlib
import time
from dataclasses import dataclass, field

PARAMS = {"step_ms": 13.3, "max_batch": 64, "prefill_tok_per_s": 10_000.0, "time_scale": 1.0}


@dataclass
class _Seq:
    prompt_tokens: int
    gen_tokens: int
    done: asyncio.Future
    produced: int = 0
    admitted: bool = False


@dataclass
class Engine:
    step_ms: float = PARAMS["step_ms"]
    max_batch: int = PARAMS["max_batch"]
    prefill_tok_per_s: float = PARAMS["prefill_tok_per_s"]
    time_scale: float = PARAMS["time_scale"]
    waiting: list[_Seq] = field(default_factory=list)
    active: list[_Seq] = field(default_factory=list)
    steps: int = 0
    peak_batch: int = 0
    busy_s: float = 0.0       # modelled engine time (decode steps + prefill), before time_scale
    prefill_s: float = 0.0

    def __post_init__(self) -> None:
        self.wake = asyncio.Event()

    async def submit(self, prompt_tokens: int, gen_tokens: int) -> None:
        seq = _Seq(prompt_tokens, gen_tokens, asyncio.get_running_loop().create_future())
        self.waiting.append(seq)
        self.wake.set()
        await seq.done

    async def run(self) -> None:
        while True:
            if not self.active and not self.waiting:
                self.wake.clear()
                await self.wake.wait()
            fresh = self.waiting[: max(0, self.max_batch - len(self.active))]
            del self.waiting[: len(fresh)]
            self.active += fresh
            self.peak_batch = max(self.peak_batch, len(self.active))
            prefill = sum(s.prompt_tokens for s in fresh) / self.prefill_tok_per_s
            step = (self.step_ms / 1000.0 + prefill) * self.time_scale
            await asyncio.sleep(step)
            self.steps += 1
            self.busy_s += step
            self.prefill_s += prefill * self.time_scale
            for s in self.active:
                s.produced += 1
            for s in [s for s in self.active if s.produced >= s.gen_tokens]:
                s.done.set_result(None)
            self.active = [s for s in self.active if s.produced < s.gen_tokens]


def fake_completion(prompt: str, max_tokens: int) -> tuple[str, int]:
    """Deterministic words of the prompt, and how many tokens they stand for."""
    h = int(hashlib.sha256(prompt.encode()).hexdigest(), 16)
    n = max(1, min(max_tokens, 8 + h % 40))
    words = [w for w in prompt.split() if w.isalpha()] or ["none"]
    return " ".join(words[(h >> (i % 200)) % len(words)] for i in range(n)), n


def make_app(engine_kw: dict | None = None, model_root: str = "/models/modelled-8b-instruct"):
    from fastapi import FastAPI, Request

    app = FastAPI()
    state: dict = {}

    @app.on_event("startup")
    async def _start() -> None:
        state["engine"] = Engine(**(engine_kw or {}))
        state["task"] = asyncio.create_task(state["engine"].run())

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "modelled", "object": "model", "owned_by": "vllm",
                                            "root": model_root, "max_model_len": 32768}]}

    @app.get("/version")
    async def version():
        return {"version": "0.0.0-modelled"}

    @app.get("/health")
    async def health():
        return {}

    @app.get("/stats")
    async def stats():
        e = state["engine"]
        return {"steps": e.steps, "peak_batch": e.peak_batch, "busy_s": e.busy_s, "prefill_s": e.prefill_s}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        prompt = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        text, n = fake_completion(prompt, int(body.get("max_tokens") or 256))
        p_tok = max(1, len(prompt) // 4)
        await state["engine"].submit(p_tok, n)
        return {"id": f"cmpl-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "modelled"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "length" if n >= int(body.get("max_tokens") or 256) else "stop"}],
                "usage": {"prompt_tokens": p_tok, "completion_tokens": n, "total_tokens": p_tok + n}}

    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8011)
    for k, v in PARAMS.items():
        ap.add_argument(f"--{k.replace('_', '-')}", type=type(v), default=v)
    a = ap.parse_args()
    import uvicorn

    kw = {k: getattr(a, k) for k in PARAMS}
    uvicorn.run(make_app(kw), host="127.0.0.1", port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
