"""GSM8K-style accuracy: lm-eval-like prompts, greedy decoding, strict and flexible extraction.

Data: JSONL with ``question`` and ``answer`` (reasoning, then ``#### <number>``), the GSM8K layout.
``completion`` mode sends n-shot text prompts ``Question: …\\nAnswer: …\\n\\n`` stopping at
``Question:``; ``chat`` mode sends the n shots as alternating user/assistant turns through the
server's chat template (0-shot by default). Strict extraction takes the number after the first
``####``; flexible extraction takes the last number in the completion.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from decimal import Decimal, InvalidOperation
from importlib.resources import files
from pathlib import Path

from radiance_bench.client import Client, gather_bounded

STRICT = re.compile(r"####\s*\$?\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")
NUMBER = re.compile(r"-?\$?[0-9][0-9,]*(?:\.[0-9]+)?")
CHAT_INSTRUCTION = (
    "Solve the math problem step by step. Finish with a last line of the form "
    "'#### N' where N is the final answer as a number."
)


def builtin_path() -> Path:
    return Path(str(files("radiance_bench") / "data" / "gsm8k_builtin.jsonl"))


def load_items(path: Path | None, limit: int | None = None) -> list[dict]:
    """Items from a JSONL file (or the built-in set): id, question, answer text, target number."""
    path = path or builtin_path()
    items = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            question, answer = row["question"], row["answer"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{n}: expected a JSON object with 'question' and 'answer' ({exc})") from exc
        target = extract_strict(answer)
        if target is None:
            raise ValueError(f"{path}:{n}: answer has no '#### <number>' line")
        qhash = hashlib.sha256(question.encode()).hexdigest()[:16]
        items.append({"id": qhash, "question": question, "answer": answer, "target": target})
    return items[:limit] if limit else items


def normalise(num: str) -> str | None:
    """Canonical decimal string: no ``$``/commas, no trailing zeros or dot ("1,200.00" → "1200")."""
    try:
        d = Decimal(num.replace(",", "").replace("$", "").rstrip("."))
    except InvalidOperation:
        return None
    return format(d.normalize(), "f")


def extract_strict(text: str) -> str | None:
    m = STRICT.search(text)
    return normalise(m.group(1)) if m else None


def extract_flexible(text: str) -> str | None:
    nums = NUMBER.findall(text)
    return normalise(nums[-1]) if nums else None


def build_request(
    item: dict, shots: list[dict], mode: str, max_tokens: int, temperature: float, seed: int, model: str
) -> tuple[str, dict]:
    """(endpoint path, payload) for one item."""
    common = {"model": model, "max_tokens": max_tokens, "temperature": temperature, "seed": seed}
    if mode == "completion":
        prompt = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)
        prompt += f"Question: {item['question']}\nAnswer:"
        return "/v1/completions", {**common, "prompt": prompt, "stop": ["Question:"]}
    if mode == "chat":
        messages = []
        for s in shots:
            messages += [
                {"role": "user", "content": f"{CHAT_INSTRUCTION}\n\n{s['question']}"},
                {"role": "assistant", "content": s["answer"]},
            ]
        messages.append({"role": "user", "content": f"{CHAT_INSTRUCTION}\n\n{item['question']}"})
        return "/v1/chat/completions", {**common, "messages": messages}
    raise ValueError(f"gsm8k mode {mode!r}: expected 'completion' or 'chat'")


def score(item: dict, out) -> dict:
    """Per-item record: both extractions, correctness, finish reason, error."""
    strict = extract_strict(out.text) if out.ok else None
    flexible = extract_flexible(out.text) if out.ok else None
    return {
        "id": item["id"],
        "target": item["target"],
        "strict": strict,
        "flexible": flexible,
        "strict_ok": strict == item["target"],
        "flexible_ok": flexible == item["target"],
        "finish_reason": out.finish_reason,
        "truncated": out.finish_reason == "length",
        "error": out.error,
        "completion_tokens": out.completion_tokens,
        "response": out.text,
    }


def summarise(records: list[dict]) -> dict:
    n = len(records)
    out = {
        "n": n,
        "errored": sum(r["error"] is not None for r in records),
        "truncated": sum(bool(r["truncated"]) for r in records),
    }
    for key in ("strict", "flexible"):
        k = sum(r[f"{key}_ok"] for r in records)
        acc = k / n if n else 0.0
        out |= {
            f"{key}_correct": k,
            f"{key}_acc": acc,
            f"{key}_acc_stderr": math.sqrt(acc * (1 - acc) / (n - 1)) if n > 1 else 0.0,
        }
    return out


async def run(
    client: Client,
    items: list[dict],
    shot_pool: list[dict],
    n_shot: int,
    mode: str,
    max_tokens: int,
    temperature: float,
    seed: int,
    concurrency: int,
    progress: bool = True,
) -> list[dict]:
    """Ask every item (its exemplars: the first ``n_shot`` of the pool other than itself); score."""

    async def one(item):
        ex = [s for s in shot_pool if s["id"] != item["id"]][:n_shot]
        path, payload = build_request(item, ex, mode, max_tokens, temperature, seed, client.model)
        return score(item, await client.post(path, payload))

    return await gather_bounded(items, one, concurrency, "gsm8k", progress)
