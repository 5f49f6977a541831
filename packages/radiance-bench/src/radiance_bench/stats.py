"""Statistics shared by the commands: latency percentiles, the paired sign test, top-k KL."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats as sps


def pct(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (linear interpolation), None for no values."""
    v = [x for x in values if x is not None]
    return float(np.percentile(v, q)) if v else None


def latency_summary(name: str, values_s: Sequence[float | None], qs=(50, 90, 99)) -> dict:
    """``{name}_ms_mean`` and ``{name}_ms_p{q}`` in milliseconds (vLLM's TTFT/TPOT/ITL convention)."""
    v = [x * 1e3 for x in values_s if x is not None]
    out = {f"{name}_ms_mean": float(np.mean(v)) if v else None}
    out.update({f"{name}_ms_p{q}": pct(v, q) for q in qs})
    return out


def sign_test(a: Sequence[bool], b: Sequence[bool]) -> dict:
    """Paired sign test on discordant pairs: H0 says A-only and B-only wins are equally likely.

    ``a_only`` = items A got right and B wrong; p = two-sided binomial(a_only; a_only + b_only, 1/2).
    """
    if len(a) != len(b):
        raise ValueError(f"sign test needs paired items: {len(a)} vs {len(b)}")
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    n = a_only + b_only
    p = float(sps.binomtest(a_only, n, 0.5).pvalue) if n else 1.0
    return {"n": len(a), "a_only": a_only, "b_only": b_only, "discordant": n, "p_value": p}


def renormalised_kl(ref_lp: np.ndarray, cand_lp: np.ndarray) -> np.ndarray:
    """Per-position KL(P‖Q) with P, Q renormalised over the same k tokens (the reference's top-k).

    ``ref_lp``, ``cand_lp``: [N, k] natural-log probabilities of the reference's top-k tokens under each
    model. P_i = exp(ref_i) / Σ_k exp(ref), likewise Q; KL = Σ_i P_i (log P_i − log Q_i), in nats.
    """
    lp = ref_lp - _logsumexp(ref_lp)
    lq = cand_lp - _logsumexp(cand_lp)
    return np.sum(np.exp(lp) * (lp - lq), axis=-1)


def _logsumexp(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    return m + np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))


def kld_summary(
    kl: np.ndarray,
    same_top: np.ndarray,
    ref_tok_lp: np.ndarray,
    cand_tok_lp: np.ndarray,
    ref_topk_lp: np.ndarray,
) -> dict:
    """llama.cpp's KL-divergence statistics (same names where they are the same quantity).

    ``ref_tok_lp``/``cand_tok_lp``: log-probability of the actual next token under each model (for
    PPL(base), PPL(Q) and Δp); ``ref_topk_lp``: the reference's top-k log-probabilities, whose
    complement mass ``1 − Σ exp`` is what the top-k leaves out of the renormalised KL.
    """
    dp = np.exp(cand_tok_lp) - np.exp(ref_tok_lp)
    left_out = np.clip(1.0 - np.exp(ref_topk_lp).sum(axis=-1), 0.0, 1.0)
    n = kl.size
    return {
        "n_tokens": int(n),
        "mean_kld": float(kl.mean()),
        "mean_kld_stderr": float(kl.std(ddof=1) / np.sqrt(n)) if n > 1 else None,
        "max_kld": float(kl.max()),
        "kld_99_9": float(np.percentile(kl, 99.9)),
        "kld_99": float(np.percentile(kl, 99)),
        "median_kld": float(np.median(kl)),
        "min_kld": float(kl.min()),
        "same_top_p": float(same_top.mean()),
        "ppl_base": float(np.exp(-ref_tok_lp.mean())),
        "ppl_q": float(np.exp(-cand_tok_lp.mean())),
        "mean_ln_ppl_ratio": float((ref_tok_lp - cand_tok_lp).mean()),
        "mean_dp": float(dp.mean()),
        "rms_dp": float(np.sqrt((dp**2).mean())),
        "topk_mass_left_out_mean": float(left_out.mean()),
        "topk_mass_left_out_max": float(left_out.max()),
    }


#: Display labels: llama.cpp's `perplexity --kl-divergence` wording where the statistic is the same.
KLD_LABELS = {
    "mean_kld": "Mean KLD",
    "max_kld": "Maximum KLD",
    "kld_99_9": "99.9% KLD",
    "kld_99": "99.0% KLD",
    "median_kld": "Median KLD",
    "min_kld": "Minimum KLD",
    "same_top_p": "Same top p",
    "ppl_base": "PPL(base)",
    "ppl_q": "PPL(Q)",
    "mean_ln_ppl_ratio": "Mean ln(PPL(Q)/PPL(base))",
    "mean_dp": "Mean Δp",
    "rms_dp": "RMS Δp",
    "topk_mass_left_out_mean": "top-k mass left out (mean)",
    "topk_mass_left_out_max": "top-k mass left out (max)",
}
