"""Development-time tools, run from the repository root; none of them ships in the installed package."""
