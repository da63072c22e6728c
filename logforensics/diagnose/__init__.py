"""Diagnose a failing run against a baseline: summaries -> facts -> rules -> findings.

``engine.evaluate`` runs the rules of ``rulespec.load_rules`` on two summaries; the
pipeline's ``diagnose_files`` and ``diagnose_runs`` are the entry points.
"""
