#!/bin/sh
# The teacher's course folder, made at their server's start: then start the server.
#   sh hub/seed_course.sh COURSE_SRC COURSE_DIR COMMAND...
# COURSE_SRC holds the course's nbgrader_config.py and source/ (the repo, or its copy in the image);
# COURSE_DIR is relative to $HOME. The first start copies them into ~/COURSE_DIR (mode 0700: it will
# hold the solutions and the gradebook); later starts leave the folder as the teacher left it.
# Runs as the teacher (one machine: the hub's spawner command for teachers; Kubernetes: the teacher
# pod's command), never as root.
set -eu
src=$1; dir=$HOME/$2; shift 2
if [ ! -e "$dir" ]; then
    mkdir -m 0700 "$dir.seeding.$$"
    cp "$src/nbgrader_config.py" "$dir.seeding.$$/"
    cp -R "$src/source" "$dir.seeding.$$/source"
    mv "$dir.seeding.$$" "$dir"
    echo "seed_course: copied the course from $src into $dir" >&2
fi
exec "$@"
