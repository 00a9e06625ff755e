"""pwe.planning.lint's pieces that need no file: the words of a command that may name a file
of the workspace, and the network file system a path is on (from a mounts table)."""

from pathlib import Path

from pwe.planning.lint import _network_fs, command_words


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
