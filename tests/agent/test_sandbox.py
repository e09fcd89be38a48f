"""The sandbox's pure decisions: which GPU devices a job gets, where its files may land,
which `working_dir` it can have, what bubblewrap is told, and how uids are leased."""

from __future__ import annotations

from pathlib import Path

from agent.protocol import GpuVendor, JobSpec
from agent.server.archives import resolve_target
from agent.server.executors.process import export_lines
from agent.server.jobaccount import JobAccount
from agent.server.sandbox import (
    Sandbox,
    clean_environment,
    file_target_problem,
    gpu_devices,
    volume_target_problem,
    working_dir_problem,
)
from agent.server.uidleases import Identities

WORK = "/var/lib/dockyard-jobs/tag/job"


def spec(**fields: object) -> JobSpec:
    return JobSpec.model_validate({"id": "job", "run_name": "run", **fields})


def test_only_the_jobs_own_gpus_are_bound_in() -> None:
    present = {"/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidiactl", "/dev/nvidia-uvm"}
    assert gpu_devices(spec(gpus=[1]), present.__contains__) == [
        "/dev/nvidia1",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
    ]
    assert gpu_devices(spec(gpus=[]), present.__contains__) == []
    amd = {"/dev/kfd", "/dev/dri/renderD128", "/dev/dri/renderD129"}
    assert gpu_devices(spec(gpus=[0], gpu_vendor=GpuVendor.AMD), amd.__contains__) == [
        "/dev/kfd",
        "/dev/dri/renderD128",
        "/dev/dri/renderD129",
    ]


def test_files_land_only_in_the_work_dir_or_tmp() -> None:
    def problem(path: str) -> str | None:
        return file_target_problem(0, path, resolve_target(path, WORK), WORK)

    assert problem("sub/x") is None and problem(".") is None and problem("/tmp/x") is None
    assert problem(f"{WORK}/y") is None
    for outside in ("/root/x", "../../x", "../x", "/etc/cron.d/x", "/tmpfoo", f"{WORK}-other"):
        message = problem(outside)
        assert message is not None and "archives[0]" in message, outside
        assert "outside the job's working dir" in message


def test_a_working_dir_needs_a_place_the_sandbox_can_mount() -> None:
    host = {"/home", "/home/me", "/home/me/project", "/usr"}
    exists = host.__contains__
    assert working_dir_problem(spec(working_dir="/workflow"), exists) is None  # a new top dir
    assert working_dir_problem(spec(working_dir="/home/me/project"), exists) is None
    assert working_dir_problem(spec(working_dir="/tmp/w"), exists) is None
    refused = working_dir_problem(spec(working_dir="/home/me/new"), exists)
    assert refused is not None and "/home/me is the host's" in refused
    assert working_dir_problem(spec(working_dir="/proc/x"), exists) is not None
    home = working_dir_problem(spec(working_dir="~/project"), exists)
    assert home is not None and "absolute path" in home
    assert working_dir_problem(spec(working_dir="/"), exists) is not None


def test_bubblewrap_gets_a_read_only_host_and_only_the_work_dir_writable(tmp_path: Path) -> None:
    hidden = tmp_path / "data"
    hidden.mkdir()
    sandbox = Sandbox(
        "/usr/bin/bwrap",
        "/usr/bin/setpriv",
        (hidden,),
        root_entries=lambda: [("bin", "usr/bin"), ("etc", None), ("proc", None), ("tmp", None)],
        exists=lambda path: path != "/workflow",  # a new top-level dir: each entry bound
    )
    argv = sandbox.argv(
        spec(working_dir="/workflow", shm_size_mib=64),
        owner=(2_000_000_007, 2_000_000_007),
        groups=(),
        host_work_dir=Path(WORK),
        devices=["/dev/nvidia0"],
    )
    joined = " ".join(argv)
    assert "--unshare-pid --as-pid-1 --unshare-ipc --unshare-uts" in joined
    assert "--symlink usr/bin /bin --ro-bind /etc /etc --dev /dev" in joined
    assert "--perms 1777 --size 67108864 --tmpfs /dev/shm" in joined
    assert "--ro-bind /proc" not in joined and "--ro-bind /tmp" not in joined
    assert "--dev-bind /dev/nvidia0 /dev/nvidia0" in joined
    assert "--proc /proc --perms 1777 --tmpfs /tmp" in joined
    assert f"--tmpfs {hidden}" in joined
    assert (
        f"--bind {WORK} {WORK} --bind {WORK} /workflow --remount-ro / --chdir /workflow" in joined
    )
    assert joined.endswith(
        "env --default-signal=HUP,INT,TERM /usr/bin/setpriv --reuid=2000000007 "
        "--regid=2000000007 --clear-groups --no-new-privs --"
    )
    assert argv[:3] == ["/bin/sh", "-c", 'trap "" HUP INT TERM; exec "$@"']


def test_the_hosts_root_is_bound_whole_when_every_mount_point_exists(tmp_path: Path) -> None:
    host = {WORK, "/home/me/project", "/data"}
    sandbox = Sandbox(
        "/usr/bin/bwrap",
        "/usr/bin/setpriv",
        root_entries=lambda: [("bin", "usr/bin"), ("etc", None), ("home", None)],
        exists=host.__contains__,
    )

    def joined(**fields: object) -> str:
        return " ".join(
            sandbox.argv(
                spec(**fields),
                owner=(2_000_000_007, 2_000_000_007),
                groups=(),
                host_work_dir=Path(WORK),
                devices=[],
            )
        )

    volume = {"host_path": str(tmp_path), "container_path": "/data"}
    for whole in ({}, {"working_dir": "/home/me/project"}, {"working_dir": "/tmp/w"}):
        argv = joined(**whole, volumes=[volume])
        assert "--unshare-uts --ro-bind / / --dev /dev" in argv, whole
        assert "--ro-bind /etc" not in argv and "--remount-ro" not in argv, whole
        assert argv.endswith("--no-new-privs --") and "--proc /proc" in argv, whole
    new_top = {**volume, "container_path": "/new-data"}
    for per_entry in ({"working_dir": "/workflow"}, {"volumes": [new_top]}):
        argv = joined(**per_entry)
        assert "--ro-bind / /" not in argv, per_entry
        assert "--symlink usr/bin /bin --ro-bind /etc /etc --ro-bind /home /home" in argv
        assert "--remount-ro / --chdir" in argv, per_entry


def test_privileged_steps_get_a_fixed_environment_and_the_job_its_own_after() -> None:
    assert clean_environment("job-1", "tag") == {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "DOCKYARD_JOB_ID": "job-1",
        "DOCKYARD_JOB_AGENT": "tag",
    }
    lines = export_lines({"A": "it's $HOME `x`", "bad-name": "x", "LD_PRELOAD": "/x.so"})
    assert lines == b"export A='it'\"'\"'s $HOME `x`'\nexport LD_PRELOAD=/x.so\n"


def test_each_job_leases_its_own_uid_and_keeps_it(tmp_path: Path) -> None:
    identities = Identities(base=5000, slots=4, lease_dir=tmp_path / "uids")
    roots = [tmp_path / f"job{n}" for n in range(4)]
    for root in roots:
        root.mkdir()
    uids = [identities.lease(root.name, root) for root in roots]
    assert len(set(uids)) == 4 and all(5000 <= uid < 5004 for uid in uids)
    assert identities.lease("job0", roots[0]) == uids[0]  # recorded: a restart keeps it
    identities.release(roots[1])
    assert not (tmp_path / "uids" / str(uids[1])).exists()
    fresh = tmp_path / "job4"
    fresh.mkdir()
    assert identities.lease("job4", fresh) == uids[1]  # the only free slot


def test_a_volume_needs_a_place_the_sandbox_can_mount() -> None:
    host = {"/home", "/home/me", "/usr"}
    exists = host.__contains__
    assert volume_target_problem("/data", exists) is None  # a new top-level dir
    assert volume_target_problem("/home/me", exists) is None  # over an existing dir
    assert volume_target_problem("/tmp/in", exists) is None
    refused = volume_target_problem("/home/me/new", exists)
    assert refused is not None and "/home/me is the host's" in refused
    for path in ("/proc/self", "/dev/x", "/", "data"):
        assert volume_target_problem(path, exists) is not None, path


def test_volumes_are_bound_where_their_links_point_read_only_when_asked(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    sandbox = Sandbox("/usr/bin/bwrap", "/usr/bin/setpriv", root_entries=lambda: [])
    volumes = [
        {"host_path": str(tmp_path / "link"), "container_path": "/data"},
        {"host_path": str(real), "container_path": "/ro", "read_only": True},
    ]
    argv = sandbox.argv(
        spec(volumes=volumes), owner=(1, 1), groups=(), host_work_dir=Path(WORK), devices=[]
    )
    joined = " ".join(argv)
    assert f"--bind {WORK} {WORK} --bind {real} /data --ro-bind {real} /ro --remount-ro /" in (
        joined
    )


def test_a_sandboxed_job_inherits_only_the_hosts_neutral_variables() -> None:
    environ = {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "HOME": "/root",
        "DOCKYARD_ADMIN_TOKEN": "server-secret",
        "AWS_SECRET_ACCESS_KEY": "host-secret",
    }
    sandboxed = JobAccount(sandbox=Sandbox("/usr/bin/bwrap", "/usr/bin/setpriv"))
    env = sandboxed.base_environment(spec(), environ, "/workflow", 2_000_000_007)
    assert env == {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "USER": "job-job",
        "LOGNAME": "job-job",
        "HOME": "/workflow",
    }
    own = JobAccount().base_environment(spec(), environ, "/w", None)  # the agent's account
    assert own == {key: value for key, value in environ.items() if key != "DOCKYARD_ADMIN_TOKEN"}
