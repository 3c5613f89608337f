"""The shell family: bash, shell_run and the persistent shell, with its runner, argv rules and posture."""
