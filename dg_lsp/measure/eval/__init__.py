"""`dg-lsp eval`: infill quality (HumanEval-Infilling pass@1, exact match, edit similarity on cases
cut from source folders) and speed (forward passes, tokens per forward, latency) of models and
trivial baselines, under oracle and fixed hole lengths."""

from dg_lsp.measure.eval.humaneval import load_suite
from dg_lsp.measure.eval.runner import Summary, evaluate, load_predictor
from dg_lsp.measure.eval.scoring import edit_similarity, exact_match
from engine.data.cases import Case, cut_cases

__all__ = [
    "Case", "Summary", "cut_cases", "edit_similarity", "evaluate", "exact_match", "load_predictor",
    "load_suite",
]
