"""Watch: follow a live log (local or over ssh), keep the state, show it, diagnose a crash."""
