"""Radiance gates: ``nox -s gates`` runs every gate module's ``gates()`` and prints one table.

A gate module is ``gates/<area>.py`` exposing ``gates(ctx) -> Iterable[Row]``. Each row carries the
figure it measured, the bar it was held to and PASS/FAIL. Gates run on an embedded default (tiny models
built on the spot under ``ctx.workdir``); shared expensive fixtures (a served tiny model) live on ``ctx``.
"""
