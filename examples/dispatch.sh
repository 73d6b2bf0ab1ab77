#!/bin/sh
# The one command cmdstalk runs for the example tubes:
#
#     cmdstalk --all --bury-exit-codes 65,78 --cmd 'exec examples/dispatch.sh'
#
# It picks the worker for the job's tube from a fixed list. Whoever can put a job chooses
# its tube and its payload, so neither may choose what runs: a command built from the tube
# name (`exec examples/workers/"$CMDSTALK_TUBE"`) runs any program on the machine for a job
# on the tube `../../../../usr/bin/python3`, with the payload as its script. Here the tube
# name is only compared with fixed strings, the payload only reaches the worker's stdin,
# and a tube without a worker exits 78 (EX_CONFIG): buried at once with --bury-exit-codes 78.
workers=$(dirname -- "$0")/workers
case "$CMDSTALK_TUBE" in
    hello.sh) exec "$workers/hello.sh" ;;
    flaky.py) exec "$workers/flaky.py" ;;
    json_worker.py) exec "$workers/json_worker.py" ;;
    slow.sh) exec "$workers/slow.sh" ;;
esac
printf 'no worker for this tube (see examples/dispatch.sh): %s\n' "$CMDSTALK_TUBE" >&2
exit 78
