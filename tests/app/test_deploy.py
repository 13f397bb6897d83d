"""The deployment files say what the worker really takes and serves: no systemd or Kubernetes here,
so their commands are parsed by the worker's own argument parser and their settings by our loaders."""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers.paths import ROOT

from fabricwatch.cli import worker
from fabricwatch.detectors.config import load_config
from fabricwatch.schemas.config import ConfigError
from fabricwatch.streams.kafka_io import load_broker_settings

DEPLOY = ROOT / "deploy"


def worker_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fabricwatch")
    worker.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def exec_start(unit: Path, instance: str) -> list[str]:
    lines = unit.read_text().replace("\\\n", " ").splitlines()
    command = next(line.split("=", 1)[1] for line in lines if line.startswith("ExecStart="))
    return shlex.split(command.replace("%i", instance))


def test_the_systemd_unit_starts_a_worker_with_arguments_it_accepts():
    argv = exec_start(DEPLOY / "systemd" / "fabricwatch-worker@.service", "2")
    assert argv[0].endswith("/fabricwatch")
    args = worker_args(argv[1:])
    assert args.command == "worker"
    assert args.web_port == 6082
    assert args.config == args.broker_config == Path("/etc/fabricwatch/fabricwatch.yaml")


def test_the_kubernetes_worker_probes_the_endpoints_the_worker_serves(tmp_path):
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "workers.yaml").read_text()))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = worker_args(container["args"])
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == args.web_port
    assert args.web_bind == "0.0.0.0"  # probes come from the kubelet, not from localhost
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    # Time for Faust to commit and leave the group on SIGTERM, beyond the session timeout's wait.
    assert pod["terminationGracePeriodSeconds"] >= 30

    config = shared_config(tmp_path)
    assert load_config(config).incast.ecn_kmin_bytes == 300_000
    password = next(e for e in container["env"] if e["name"] == "FABRICWATCH_SASL_PASSWORD")
    assert "secretKeyRef" in password["valueFrom"]
    broker = load_broker_settings(config, {"FABRICWATCH_SASL_PASSWORD": "s3cret"})
    assert broker.security_protocol == "SASL_SSL" and broker.sasl_password == "s3cret"
    assert "s3cret" not in repr(broker)


def test_the_environment_file_names_only_variables_the_settings_read():
    names = {
        line.lstrip("# ").split("=", 1)[0]
        for line in (DEPLOY / "systemd" / "fabricwatch.env").read_text().splitlines()
        if "=" in line and line.lstrip("# ").startswith("FABRICWATCH_")
    }
    clickhouse = {"FABRICWATCH_CLICKHOUSE_URL", "FABRICWATCH_CLICKHOUSE_PASSWORD"}
    known = clickhouse | {
        f"FABRICWATCH_{k}"
        for k in (
            "BROKER",
            "SECURITY_PROTOCOL",
            "SASL_MECHANISM",
            "SASL_USERNAME",
            "SASL_PASSWORD",
            "SSL_CAFILE",
        )
    }
    assert names and names <= known
    env = {n: "x" for n in names if n not in clickhouse}
    env.update(FABRICWATCH_SECURITY_PROTOCOL="SASL_SSL", FABRICWATCH_SASL_MECHANISM="PLAIN")
    assert load_broker_settings(None, env).bootstrap == "x"


def collect_args(argv: list[str]) -> argparse.Namespace:
    from fabricwatch.cli import collect

    parser = argparse.ArgumentParser(prog="fabricwatch")
    collect.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_the_systemd_collector_unit_runs_collect_with_arguments_it_accepts():
    unit = DEPLOY / "systemd" / "fabricwatch-collect.service"
    args = collect_args(exec_start(unit, "")[1:])
    assert args.command == "collect" and args.out is None
    assert args.config == args.broker_config == Path("/etc/fabricwatch/fabricwatch.yaml")
    text = unit.read_text()
    assert "User=fabricwatch" in text and "CapabilityBoundingSet=\n" in text  # no root, no capability


def test_the_systemd_burst_unit_waits_for_incidents_on_the_netdev_it_is_instanced_for():
    unit = DEPLOY / "systemd" / "fabricwatch-burst@.service"
    args = collect_args(exec_start(unit, "eth2")[1:])
    assert (args.command, args.source, args.netdev) == ("collect", "burst", ["eth2"])
    assert args.on_incident and args.broker_config == Path("/etc/fabricwatch/fabricwatch.yaml")
    assert "User=fabricwatch" in unit.read_text() and "CapabilityBoundingSet=\n" in unit.read_text()


def test_the_systemd_sonic_collector_unit_runs_collect_sonic_with_arguments_it_accepts():
    unit = DEPLOY / "systemd" / "fabricwatch-collect-sonic.service"
    args = collect_args(exec_start(unit, "")[1:])
    assert (args.command, args.source) == ("collect", "sonic") and args.out is None
    assert args.config == args.broker_config == Path("/etc/fabricwatch/fabricwatch.yaml")
    assert "User=fabricwatch" in unit.read_text()


def test_the_collector_daemonset_reads_the_node_s_sysfs_and_interfaces_unprivileged():
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "collector.yaml").read_text()))
    daemonset = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = collect_args(container["args"])
    assert args.command == "collect" and args.broker_config == Path("/etc/fabricwatch/fabricwatch.yaml")
    assert pod["hostNetwork"] is True  # the ioctl reads the interfaces of the pod's namespace
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    sys_mount = next(m for m in mounts.values() if Path(m["mountPath"]) == args.sysfs_root)
    assert sys_mount["readOnly"] is True and volumes[sys_mount["name"]]["hostPath"]["path"] == "/sys"
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]} and not security.get("privileged")
    assert pod["securityContext"]["runAsNonRoot"] is True
    env = {e["name"] for e in container["env"]}
    assert "$(NODE_NAME)" in args.host and {"NODE_NAME", "POD_IP"} <= env
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == args.web_port and args.web_bind == "$(POD_IP)"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    lldpd = next(m for m in mounts.values() if m["mountPath"] == args.lldp_socket)
    # No type check (Found, issue 32, 6: type Socket kept the pod from starting on a node without
    # lldpd, although LLDP is optional to the collector).
    assert volumes[lldpd["name"]]["hostPath"] == {"path": "/run/lldpd.socket"}
    workers = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "workers.yaml").read_text()))
    config_map = next(d for d in workers if d["kind"] == "ConfigMap")
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]


def test_the_switch_collector_deployment_shares_switches_and_its_job_publishes_them():
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "switch-collector.yaml").read_text()))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    job = next(d for d in docs if d["kind"] == "Job")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = collect_args(container["args"])
    assert (args.source, args.assigned, args.publish_switches) == ("sonic", True, False)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == args.web_port and container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert deployment["spec"]["replicas"] >= 2
    publish = collect_args(job["spec"]["template"]["spec"]["containers"][0]["args"])
    assert publish.publish_switches and publish.config == args.config


def phases_args(argv: list[str]) -> argparse.Namespace:
    from fabricwatch.cli import phases

    parser = argparse.ArgumentParser(prog="fabricwatch")
    phases.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_the_systemd_phase_collector_unit_runs_phases_collect_with_arguments_it_accepts():
    unit = DEPLOY / "systemd" / "fabricwatch-phases.service"
    args = phases_args(exec_start(unit, "")[1:])
    assert (args.command, args.mode) == ("phases", "collect") and args.job is None  # a job per directory
    assert args.log == ["/var/log/nccl/*/*.log"]
    assert args.config == args.broker_config == Path("/etc/fabricwatch/fabricwatch.yaml")
    assert "User=fabricwatch" in unit.read_text()


def test_the_daemonset_follows_the_node_s_nccl_logs_read_only():
    docs = list(yaml.safe_load_all((DEPLOY / "kubernetes" / "collector.yaml").read_text()))
    pod = next(d for d in docs if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "phases")
    args = phases_args(container["args"])
    assert (args.command, args.mode, args.job) == ("phases", "collect", None)
    (pattern,) = args.log
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    logs = next(m for m in mounts.values() if pattern.startswith(m["mountPath"] + "/"))
    assert logs["readOnly"] is True and volumes[logs["name"]]["hostPath"]["path"] == "/var/log/nccl"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http-phases"] == args.web_port and args.web_bind == "$(POD_IP)"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-phases"}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_the_sink_takes_its_clickhouse_from_the_environment_and_refuses_an_empty_url(monkeypatch, capsys):
    """The shipped unit's ``--clickhouse ${FABRICWATCH_CLICKHOUSE_URL}`` became ``--clickhouse ""``
    with the variable unset, which silently meant chdb in the current directory; and the URL, with
    its password, showed in ``ps``."""
    from fabricwatch.cli import options
    from fabricwatch.cli.main import main, parser
    from fabricwatch.storage.backends import ServerAddress

    with pytest.raises(SystemExit) as exited:
        main(["sink", "--broker", "127.0.0.1:9", "--clickhouse", ""])
    assert exited.value.code == 2
    assert "--clickhouse: empty" in capsys.readouterr().err
    monkeypatch.setenv("FABRICWATCH_CLICKHOUSE_URL", "clickhouse://fabricwatch@ch.example:9000/fw")
    monkeypatch.setenv("FABRICWATCH_CLICKHOUSE_PASSWORD", "s3cret")
    args = parser().parse_args(["sink", "--broker", "127.0.0.1:9"])
    target = options.store_target(args)
    assert target == "clickhouse://fabricwatch@ch.example:9000/fw"
    address = ServerAddress.parse(str(target))
    assert (address.user, address.password, address.database) == ("fabricwatch", "s3cret", "fw")
    assert "s3cret" not in repr(address)
    assert ServerAddress.parse("clickhouse://u:given@h/db").password == "given"  # a URL's own wins
    explicit = parser().parse_args(["sink", "--broker", "127.0.0.1:9", "--data-dir", "here"])
    assert str(options.store_target(explicit)) == "here"  # an option given beats the environment
    for command in (["report", "--out", "r"], ["replay", "t"], ["demo"], ["run"]):
        assert not str(options.store_target(parser().parse_args(command))).startswith("clickhouse")


def test_the_example_config_is_accepted_by_every_daemon():
    """deploy/fabricwatch.yaml, section by section, read as each daemon reads it."""
    from fabricwatch.alerts.config import load_alerts_config
    from fabricwatch.ingest.gnmi.subscribe import GnmiSettings
    from fabricwatch.ingest.nic.poll import CollectSettings
    from fabricwatch.ingest.sonic.poll import SonicSettings
    from fabricwatch.schemas.config import ConfigFile

    example = DEPLOY / "fabricwatch.yaml"
    assert load_broker_settings(example, {}).security_protocol == "SASL_SSL"
    assert load_config(example).incast.ecn_kmin_bytes == 150_000
    alerts = load_alerts_config(example, {"FABRICWATCH_ALERTMANAGER_URL": "https://am.example/api/v2/alerts"})
    assert list(alerts.receivers) == ["oncall"]
    config = ConfigFile(example)
    assert config.section("collect", CollectSettings).ethtool == "ioctl"
    assert [s.name for s in config.section("sonic", SonicSettings).switches] == ["leaf01", "leaf02"]
    assert [t.name for t in config.section("gnmi", GnmiSettings).targets] == ["spine01"]


def test_the_image_the_manifests_name_is_built_by_the_dockerfile():
    """No registry is reachable here, so the Dockerfile is checked as text: a Python 3.11 base, our
    wheel built from this repository and installed, run as the manifests' user, the command as its
    entry point; and every manifest names the tag docs/deploy.md builds, at the package's version."""
    import tomllib

    root = DEPLOY.parent
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    image = f"ghcr.io/fabricwatch/fabricwatch:{version}"
    lines = [line.strip() for line in (root / "Dockerfile").read_text().splitlines() if line.strip()]
    steps = [line for line in lines if not line.startswith("#")]
    assert all(s.split()[1].startswith("python:3.11") for s in steps if s.startswith("FROM"))
    assert any(s.startswith("RUN pip wheel") and s.endswith(" .") for s in steps)
    assert any(s.startswith("RUN pip install") and ".whl" in s for s in steps)
    assert 'ENTRYPOINT ["fabricwatch"]' in steps
    user = next(s.split()[1] for s in steps if s.startswith("USER "))
    for manifest in (DEPLOY / "kubernetes").glob("*.yaml"):
        for doc in yaml.safe_load_all(manifest.read_text()):
            spec = (doc or {}).get("spec", {})
            pod = spec.get("template", {}).get("spec") or spec.get("jobTemplate", {}).get("spec", {}).get(
                "template", {}
            ).get("spec")
            if not pod:
                continue
            assert str(pod["securityContext"]["runAsUser"]) == user, manifest.name
            for container in pod["containers"]:
                assert container["image"] == image, (manifest.name, container["name"])
    assert f"docker build -t {image} ." in (root / "docs" / "deploy.md").read_text()


MANIFESTS = sorted((DEPLOY / "kubernetes").glob("*.yaml"))


def pods(manifest: Path) -> list[dict]:
    return [
        d["spec"]["template"]["spec"]
        for d in yaml.safe_load_all(manifest.read_text())
        if d and d["kind"] in ("Deployment", "DaemonSet", "Job", "StatefulSet")
    ]


def shared_config(tmp_path: Path) -> Path:
    """The ConfigMap every manifest mounts, written where a test reads it, with the CA file its
    broker: section names laid at a path of the test's (the pods mount the Secret there)."""
    docs = yaml.safe_load_all((DEPLOY / "kubernetes" / "workers.yaml").read_text())
    text = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["fabricwatch.yaml"]
    ca_dir = tmp_path / "ca"
    ca_dir.mkdir(exist_ok=True)
    (ca_dir / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    config = tmp_path / "fabricwatch.yaml"
    config.write_text(text.replace("/etc/fabricwatch-ca/", f"{ca_dir}/"))
    return config


@pytest.mark.parametrize("manifest", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_s_containers_take_their_arguments_and_mount_what_the_config_names(manifest):
    """Found (issue 32, 6): the switch collector's Job failed on the shared ConfigMap (no sonic:
    section) and nothing mounted the CA its broker: section names."""
    from fabricwatch.cli.main import parser

    docs = yaml.safe_load_all((DEPLOY / "kubernetes" / "workers.yaml").read_text())
    config = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["fabricwatch.yaml"])
    ca_dir = str(Path(config["broker"]["ssl_cafile"]).parent)
    for pod in pods(manifest):
        for container in pod["containers"]:
            args = parser().parse_args(container["args"])
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            if "/etc/fabricwatch" in mounts:
                assert ca_dir in mounts, f"{manifest.name}: {container['name']} mounts no {ca_dir}"
            if getattr(args, "web_port", None):
                ports = [p["containerPort"] for p in container.get("ports", [])]
                assert args.web_port in ports, f"{manifest.name}: {container['name']}"
            env = {e["name"] for e in container.get("env", [])}
            assert "password" not in " ".join(container["args"]).lower() or env, container["name"]


def test_the_shared_config_map_serves_every_daemon_that_mounts_it(tmp_path):
    from fabricwatch.alerts.config import load_alerts_config
    from fabricwatch.ingest.sonic.poll import SonicSettings
    from fabricwatch.schemas.config import ConfigFile

    config = shared_config(tmp_path)
    broker = load_broker_settings(config, {"FABRICWATCH_SASL_PASSWORD": "s3cret"})
    assert broker.ssl_cafile and Path(broker.ssl_cafile).is_file()
    assert ConfigFile(config).section("sonic", SonicSettings).switches  # the Job has switches to put
    assert load_alerts_config(config).receivers
    assert load_config(config).incast.ecn_kmin_bytes == 300_000


def test_a_missing_ca_file_is_named_with_its_key(tmp_path):
    """Found (issue 32, 6): without the CA Secret mounted, the error was kafka-python's, garbled."""
    config = shared_config(tmp_path)
    (tmp_path / "ca" / "ca.crt").unlink()
    with pytest.raises(ConfigError, match=r"broker\.ssl_cafile .*ca\.crt: no such file"):
        load_broker_settings(config, {}).kafka_kwargs()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_every_unit_passes_systemd_analyze_verify(tmp_path):
    """Found (issue 32, 6): ``SupplementaryGroups=_lldpd`` failed (216/GROUP) where lldpd is absent.
    The units name /opt/fabricwatch/bin/fabricwatch; here they run the installed one."""
    installed = shutil.which("fabricwatch")
    assert installed, "fabricwatch is not installed"
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        text = unit.read_text().replace("/opt/fabricwatch/bin/fabricwatch", installed)
        assert "SupplementaryGroups=" not in "".join(
            line for line in text.splitlines(keepends=True) if not line.startswith("#")
        ), unit.name
        name = unit.name.replace("@.service", "@1.service")
        (tmp_path / name).write_text(text)
        done = subprocess.run(
            ["systemd-analyze", "verify", str(tmp_path / name)], capture_output=True, text=True, timeout=60
        )
        said = done.stdout + done.stderr
        assert done.returncode == 0 and "Unknown" not in said and "not executable" not in said, (
            unit.name,
            said,
        )
