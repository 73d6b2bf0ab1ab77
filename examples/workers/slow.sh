#!/bin/sh
# Overruns its TTR: cmdstalk sends SIGTERM to its process group before the TTR expires,
# SIGKILL after a grace period, and buries the job (a later `kick` gives it a fresh try).
echo "working on a job with TTR ${CMDSTALK_TTR}s, but this takes 600s"
cat >/dev/null
sleep 600
