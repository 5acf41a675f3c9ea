"""hub/exchange_setup.py: the exchange root 1777 and each course's folder the teacher's, whatever a
student left there first (a folder, a symlink, a file). Needs root (it chowns); the live hub test
runs it for real at the hub's start."""
import os
import stat

import pytest

from tinygpt_course.testing.course import load_script, REPO

TEACHER, SQUATTER = (64001, 64001), 64002     # uids no account uses: only ownership matters here

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="exchange_setup chowns: needs root")


def _prepare():
    module = load_script(REPO / "hub" / "exchange_setup.py", "tinygpt_hub_exchange_setup")
    return module.prepare


def _check_course(course):
    st = os.lstat(course)
    assert stat.S_ISDIR(st.st_mode) and (st.st_uid, st.st_gid) == TEACHER and stat.S_IMODE(st.st_mode) == 0o755
    modes = {d: stat.S_IMODE(os.lstat(course / d).st_mode) for d in ("outbound", "inbound", "feedback")}
    assert modes == {"outbound": 0o755, "inbound": 0o3733, "feedback": 0o711}, {k: oct(v) for k, v in modes.items()}
    assert all(os.lstat(course / d).st_uid == TEACHER[0] for d in modes)


@pytest.mark.parametrize("squat", ["folder", "symlink", "file", "teacher-folder-writable"])
def test_a_squatted_course_folder_is_moved_aside(tmp_path, squat):
    root, target = tmp_path / "exchange", tmp_path / "elsewhere"
    root.mkdir()
    target.mkdir()
    course = root / "tinygpt"
    if squat == "folder":
        course.mkdir()
        (course / "outbound").mkdir()
        os.chown(course, SQUATTER, SQUATTER)
    elif squat == "symlink":
        course.symlink_to(target)
        os.chown(course, SQUATTER, SQUATTER, follow_symlinks=False)
    elif squat == "file":
        course.write_text("trap")
        os.chown(course, SQUATTER, SQUATTER)
    else:                                   # the teacher's own, but others may add entries
        course.mkdir(mode=0o777)
        os.chmod(course, 0o777)
        os.chown(course, *TEACHER)
    moved = _prepare()(str(root), {"tinygpt": TEACHER}, log=lambda msg: None)
    assert stat.S_IMODE(os.stat(root).st_mode) == 0o1777 and os.stat(root).st_uid == 0
    _check_course(course)
    if squat == "teacher-folder-writable":
        assert not moved, "the teacher's own folder should stay"
    else:
        aside = moved["tinygpt"]
        assert os.path.basename(aside).startswith(f".squatted-tinygpt-uid{SQUATTER}-")
        assert os.lstat(aside).st_uid == 0, "the squatter still owns what was moved aside"
        assert os.listdir(target) == [], "the symlink's target was changed"


def test_the_teachers_release_stays(tmp_path):
    root = tmp_path / "exchange"
    prepare = _prepare()
    prepare(str(root), {"tinygpt": TEACHER}, log=lambda msg: None)
    released = root / "tinygpt" / "outbound" / "multihead"
    released.mkdir()
    (released / "multihead.ipynb").write_text("{}")
    os.chmod(root / "tinygpt" / "inbound", 0o2733)       # as nbgrader's release makes it
    assert prepare(str(root), {"tinygpt": TEACHER}, log=lambda msg: None) == {}
    assert (released / "multihead.ipynb").read_text() == "{}"
    _check_course(root / "tinygpt")


def test_course_ids_that_are_paths_are_refused(tmp_path):
    for bad in ("../etc", ".hidden", ""):
        with pytest.raises(ValueError):
            _prepare()(str(tmp_path / "x"), {bad: TEACHER}, log=lambda msg: None)
