"""Render: summaries and diagnoses for people (terminal tables, the diff verdict, the HTML report)."""
