"""pwe.planning.lint's pieces that need no file: the words of a command that may name a file
of the workspace, and the network file system a path is on (from a mounts table)."""

from pathlib import Path

from pwe.planning.lint import PathShapes, _network_fs, command_words


def test_the_words_of_a_command_that_may_name_a_file():
    """Template parts are no words ({{ seed }} is no file named seed); operators are apart;
    what a redirection writes is left out; NAME=VALUE and --opt=VALUE are their VALUE;
    $PWE_WORKSPACE/ comes off the front; words with a variable or a glob name no one file."""
    cmd = ('FOO=a.cfg ./sim.sh {{ seed }} --config=conf/x.ini > out.txt 2> err.txt; python fit.py|tee log '
           '&& bash "$PWE_WORKSPACE"/scripts/prep.sh < in.dat $HOME/x data/*.csv {{ seed }}.dat')
    assert command_words(cmd) == ["a.cfg", "./sim.sh", "conf/x.ini", ";", "python", "fit.py", "|", "tee", "log",
                                  "&&", "bash", "scripts/prep.sh", "<", "in.dat"]
    assert command_words("echo 'unclosed") == ["echo", "'unclosed"]  # (the template's own business)
    assert command_words("{% for i in range(3) %}./a{{ i }}.sh {% endfor %}") == []


MOUNTS = """\
/dev/sda1 / ext4 rw 0 0
server:/home /home nfs4 rw 0 0
/dev/sdb1 /home/local ext4 rw 0 0
fs@o2ib:/lus /lus lustre rw 0 0
/dev/sdc1 /with\\040space xfs rw 0 0
"""


def test_the_network_file_system_a_path_is_on():
    """The longest mount point holding the path decides: a local disk mounted inside an NFS
    home is local; a prefix of a name is not its mount point (/lustre is not on /lus)."""
    assert _network_fs(Path("/home/u/ws"), MOUNTS) == "nfs4"
    assert _network_fs(Path("/home/local/ws"), MOUNTS) is None
    assert _network_fs(Path("/lus/proj"), MOUNTS) == "lustre"
    assert _network_fs(Path("/lustre/proj"), MOUNTS) is None
    assert _network_fs(Path("/with space/ws"), MOUNTS) is None
    assert _network_fs(Path("/tmp"), MOUNTS) is None


def test_the_paths_a_template_makes_are_matched_without_backtracking():
    """A template's literal text with a hole for each part: './' off the front, each hole at
    least a character; 40 holes, each before an x, against paths of x's that do not fit:
    answered at once (a regular expression of '.+' per hole backtracks for ever)."""
    shapes = PathShapes(["./out/{{ T }}/seed{{ seed }}.txt", "plain.txt"])
    assert shapes.match("out/300/seed1.txt") and shapes.match("plain.txt")
    assert not shapes.match("out//seed1.txt") and not shapes.match("out/300/seed.txt")
    assert not shapes.match("out/300/seed1.txt.bak") and not shapes.match("xout/300/seed1.txt")
    many = PathShapes(["{{ a }}x" * 40 + "end"])
    # (as the regular expression '.+x' * 40 + 'end', the first takes ~10 s at 12 holes, x10 a hole more)
    assert not many.match("x" * 100 + "en")
    assert not many.match("x" * 50 + "end")  # (too short for 40 holes and 40 x's)
    assert many.match("x" * 4000 + "end") and many.match("ax" * 40 + "end")
