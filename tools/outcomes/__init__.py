"""The outcome family: what done means, grading, evaluation and the outcome gate."""
