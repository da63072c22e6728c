"""Export: a run's events written for other programs (jsonl, Parquet, CSV), each read from the logs.

Beside ``render`` (summaries and diagnoses for people) and at its level: an export reads the
logs itself, a block at a time, and writes its rows as it goes, in bounded memory.
"""
