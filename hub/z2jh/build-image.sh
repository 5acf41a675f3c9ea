#!/bin/bash
# The image every pod runs, students' included: this repo WITHOUT what holds a solution or a hidden
# test (source/, tests/ with its catalogue of right answers, docs/ with the teacher's guide, bench/,
# autograded/, and notebooks/trained_heads.ipynb, which defines every lesson's class in full). The teacher's pod gets source/ by its own route (values.yaml custom.tinygpt.courseSecret).
#
#   bash hub/z2jh/build-image.sh REGISTRY/tinygpt-course:TAG     # then: docker push REGISTRY/tinygpt-course:TAG
#   bash hub/z2jh/build-image.sh --context DIR                  # only write the build context to DIR
#
# The context is `git archive HEAD` (committed files only) less those folders; repo2docker builds it
# from environment.yml, apt.txt (bubblewrap) and postBuild, into /srv/tinygpt-course.
# tests/test_z2jh_pods.py builds the context and looks for every solution line of source/ in it.
set -euo pipefail
# The grading Job's pods (grade-job.yaml) allow privilege escalation, for newuidmap/newgidmap alone: so
# no file of the image stays set-uid or set-gid, and those two get one file capability each instead
# (CAP_SETUID, CAP_SETGID: what writing a user namespace's uid_map, gid_map needs; with the capability
# their effective uid stays the teacher's, the owner of the namespace, so nothing else is needed, where
# the set-uid root newuidmap of Debian 12's uidmap would also need CAP_DAC_OVERRIDE and CAP_SYS_ADMIN).
# apt.txt installs uidmap and libcap2-bin (setcap).
APPENDIX='USER root
RUN find / -xdev -type f -perm /6000 -exec chmod ug-s {} + \
 && setcap cap_setuid+ep /usr/bin/newuidmap && setcap cap_setgid+ep /usr/bin/newgidmap
USER ${NB_USER}'
EXCLUDED=(source tests docs bench autograded notebooks/trained_heads.ipynb)
repo=$(cd "$(dirname "$0")/../.." && pwd)
if [ "${1:-}" = "--context" ]; then
    ctx=$2; mkdir -p "$ctx"
else
    image=${1:?usage: build-image.sh REGISTRY/tinygpt-course:TAG | --context DIR}
    ctx=$(mktemp -d); trap 'rm -rf "$ctx"' EXIT
fi
git -C "$repo" archive --format=tar HEAD | tar -x -C "$ctx"
for d in "${EXCLUDED[@]}"; do rm -rf "${ctx:?}/$d"; done
if [ -n "${image:-}" ]; then
    jupyter-repo2docker --no-run --user-name jovyan --target-repo-dir /srv/tinygpt-course \
        --appendix "$APPENDIX" --image-name "$image" "$ctx"
fi
