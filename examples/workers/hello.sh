#!/bin/sh
# Succeeds: greets whoever the payload names. Exit 0 → cmdstalk deletes the job.
name=$(cat)
echo "hello, ${name:-world} (job $CMDSTALK_JOB_ID on tube $CMDSTALK_TUBE)"
