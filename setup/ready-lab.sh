#!/bin/sh
# A box is ready when a short lab passes every check: `make lab` with --strict (the lab
# exits 3 on a failed check, and its last line names it). One definition for lab-ready
# (setup/lab-ready.sh), the lab steps of make image-test and make vm-test, and the
# instructor's rehearsal (exercises/INSTRUCTOR.md), all `sh setup/ready-lab.sh 0,2 10`.
#   sh setup/ready-lab.sh STAGES DURATION [MORE LAB_ARGS]
set -u
[ $# -ge 2 ] || { echo "usage: sh setup/ready-lab.sh STAGES DURATION [LAB_ARGS]" >&2; exit 2; }
stages=$1 duration=$2
shift 2
if make lab STAGES="$stages" DURATION="$duration" LAB_ARGS="--strict $*"; then
    exit 0
fi
echo "ready-lab: NOT ready: a check failed or a stage did not run (the lab's line above names it)" >&2
exit 1
