"""deploy/, checked offline: the Kubernetes manifests against Kubernetes 1.37's schemas (kubernetes-validate,
strict: unknown fields fail) and, for the Prometheus Operator's PodMonitor / ServiceMonitor / PrometheusRule
(custom resources, for which kubernetes-validate bundles no schema), against our own schema of them
(prometheus_operator_v1.schema.json); the wiring between the objects (selectors, ports, probes, volumes);
every `zoo` command line in the manifests and systemd units parsed by zoo's own argument parser; the systemd
units by `systemd-analyze verify`; the container image definition by reading it (no Docker daemon here)."""

from __future__ import annotations

import copy
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from observe.prometheus_sd import SD_PATH
from zoo.cli import build_parser

kubernetes_validate = pytest.importorskip("kubernetes_validate")  # the dev extra; brings jsonschema and PyYAML
import jsonschema  # noqa: E402
import yaml  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = REPO_ROOT / "deploy"
K8S_VERSION = "1.37.0"
OPERATOR_API = "monitoring.coreos.com/v1"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
OPERATOR_SCHEMA = json.loads((Path(__file__).parent / "prometheus_operator_v1.schema.json").read_text())
KEDA_API = "keda.sh/v1alpha1"
KEDA_SCHEMA = json.loads((Path(__file__).parent / "keda_v1alpha1.schema.json").read_text())


def _documents() -> list[dict]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


DOCS = _documents()


def _validate(doc: dict) -> None:
    """Raises if ``doc`` is not a valid object of its kind; every kind in deploy/k8s has a schema."""
    if doc["apiVersion"] == OPERATOR_API:
        schema = {**OPERATOR_SCHEMA, "$ref": f"#/$defs/{doc['kind']}"}
        jsonschema.Draft202012Validator(schema).validate(doc)
    elif doc["apiVersion"] == KEDA_API:
        jsonschema.Draft202012Validator({**KEDA_SCHEMA, "$ref": f"#/$defs/{doc['kind']}"}).validate(doc)
        behavior = doc["spec"].get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
        if behavior is not None:  # the HPA's own field: checked inside an HPA by Kubernetes' schema
            hpa = {
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "hpa"},
                "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, "maxReplicas": 2, "behavior": behavior},
            }  # fmt: skip
            kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def _of_kind(kind: str) -> list[dict]:
    return [d for d in DOCS if d["kind"] == kind]


def _named(kind: str, name: str) -> dict:
    (doc,) = [d for d in _of_kind(kind) if d["metadata"]["name"] == name]
    return doc


def _agents() -> list[dict]:
    return [d for d in _of_kind("Deployment") if _container(d)["args"][0] == "agent"]


def _container(deployment: dict) -> dict:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _zoo_args(container: dict) -> object:
    """The container's command line parsed by `zoo`'s own parser ($(VAR) references filled in)."""
    args = [re.sub(r"\$\((\w+)\)", "X", a) for a in container["args"]]
    return build_parser().parse_args(args)


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_manifest_validates(doc):
    _validate(doc)


def test_the_validators_catch_mistakes():
    agent = copy.deepcopy(_of_kind("Deployment")[-1])
    _container(agent)["readinesProbe"] = _container(agent).pop("readinessProbe")  # misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(agent)
    monitor = copy.deepcopy(_of_kind("PodMonitor")[0])
    monitor["spec"]["podMetricsEndpoints"][0]["intervall"] = "15s"
    with pytest.raises(jsonschema.ValidationError):
        _validate(monitor)
    monitor = copy.deepcopy(_of_kind("ServiceMonitor")[0])
    monitor["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(jsonschema.ValidationError):
        _validate(monitor)
    rules = copy.deepcopy(_of_kind("PrometheusRule")[0])
    rules["spec"]["groups"][1]["rules"][0]["for"] = "1 minute"
    with pytest.raises(jsonschema.ValidationError):
        _validate(rules)
    rules = copy.deepcopy(_of_kind("PrometheusRule")[0])
    rules["spec"]["groups"][1]["rules"][0]["record"] = "both:a_record:and_an_alert"
    with pytest.raises(jsonschema.ValidationError):
        _validate(rules)
    scaler = copy.deepcopy(_of_kind("ScaledObject")[0])
    scaler["spec"]["maxReplicas"] = scaler["spec"].pop("maxReplicaCount")  # the HPA's name, not KEDA's
    with pytest.raises(jsonschema.ValidationError):
        _validate(scaler)
    scaler = copy.deepcopy(_of_kind("ScaledObject")[0])
    scaler["spec"]["triggers"][0]["metadata"]["threshold"] = 1  # KEDA's metadata values are strings
    with pytest.raises(jsonschema.ValidationError):
        _validate(scaler)
    scaler = copy.deepcopy(_of_kind("ScaledObject")[0])
    scaler["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilisationWindow"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(scaler)


def test_agents_are_one_workload_per_gpu_type_ready_when_joined():
    agents = _agents()
    products = [d["spec"]["template"]["spec"]["nodeSelector"][GPU_PRODUCT_LABEL] for d in agents]
    assert len(agents) >= 2 and len(set(products)) == len(products), products
    agents_service = _named("Service", "zoo-controlplane-agents")
    assert agents_service["spec"]["publishNotReadyAddresses"] is True  # reachable before any agent joined
    for agent in agents:
        spec = agent["spec"]
        assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
        container = _container(agent)
        args = _zoo_args(container)
        assert args.device == "cuda" and args.metrics_host == "0.0.0.0"
        assert (
            args.control == f"tcp://{agents_service['metadata']['name']}:{agents_service['spec']['ports'][0]['port']}"
        )
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        (port,) = container["ports"]
        assert port["containerPort"] == args.metrics_port
        assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": port["name"]}
        env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
        assert "--metrics-advertise=$(POD_IP)" in container["args"]  # what the discovery lists: the pod's IP
        assert env["POD_IP"] == "status.podIP" and env["POD_NAME"] == "metadata.name"
        grace = agent["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        assert grace > args.drain_timeout_s  # SIGTERM drains before the kubelet's SIGKILL


def test_the_control_plane_is_served_and_scraped():
    cp = _named("Deployment", "zoo-controlplane")
    container = _container(cp)
    args = _zoo_args(container)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args.http == f"0.0.0.0:{ports['http']}" and args.listen.endswith(f":{ports['agents']}")
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}  # 503 while draining
    grace = cp["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert 0 < args.shutdown_timeout < grace  # SIGTERM drains (zoo/controlplane_shutdown.py) before the SIGKILL
    service = _named("Service", "zoo-controlplane")
    assert service["spec"]["selector"].items() <= cp["spec"]["template"]["metadata"]["labels"].items()
    (monitor,) = _of_kind("ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for p in service["spec"]["ports"]}
    (pod_monitor,) = _of_kind("PodMonitor")
    for agent in _agents():
        labels = agent["spec"]["template"]["metadata"]["labels"]
        assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] in {p["name"] for p in _container(agent)["ports"]}


def test_each_agent_workload_is_scaled_to_the_capacity_plan_of_its_cell_and_gpu_type(tmp_path):
    """KEDA scales each agent Deployment to zoo:capacity_desired_nodes of the cell and GPU type its agents report,
    within the bounds the control plane's capacity plan uses, which it reads from the ConfigMap mounted for it."""
    from agent.node_agent import served_model_name
    from backends.gpu_table import match_gpu_name
    from controlplane.capacity_plan import load_capacity_plan
    from observe.metrics_names import CAPACITY_DESIRED_NODES

    cp = _named("Deployment", "zoo-controlplane")
    container = _container(cp)
    path = Path(_zoo_args(container).capacity_plan)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(path.parent)]
    (volume,) = [v for v in cp["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]]
    (tmp_path / path.name).write_text(_named("ConfigMap", volume["configMap"]["name"])["data"][path.name])
    plan = load_capacity_plan(str(tmp_path / path.name))
    scalers = {d["spec"]["scaleTargetRef"]["name"]: d for d in _of_kind("ScaledObject")}
    agents = _agents()
    assert sorted(scalers) == sorted(a["metadata"]["name"] for a in agents)
    declared = {v.key for v in plan.variants}
    for agent in agents:
        scaler = scalers[agent["metadata"]["name"]]
        gpu_type = match_gpu_name(agent["spec"]["template"]["spec"]["nodeSelector"][GPU_PRODUCT_LABEL]).gpu_type
        cell = _zoo_args(_container(agent)).cell
        (trigger,) = scaler["spec"]["triggers"]
        assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"  # replicas = value / 1
        assert trigger["metadata"]["threshold"] == "1"
        assert trigger["metadata"]["query"] == f'max({CAPACITY_DESIRED_NODES}{{cell="{cell}", gpu_type="{gpu_type}"}})'
        assert (scaler["spec"]["minReplicaCount"], scaler["spec"]["maxReplicaCount"]) == plan.bounds(gpu_type)
        assert plan.cost(gpu_type) != plan.default_cost  # every type the fleet runs is priced
        assert scaler["spec"]["fallback"]["replicas"] >= scaler["spec"]["minReplicaCount"]
        model = served_model_name(_named("ConfigMap", "zoo-config")["data"]["MODEL_PATH"])
        assert (model, cell, gpu_type) in declared  # planned, its metric exported, before its first agent joins
        declared.remove((model, cell, gpu_type))
    assert not declared  # no pool declared that no Deployment serves


def test_every_reference_points_at_an_object_of_the_manifests():
    config_maps = {d["metadata"]["name"] for d in _of_kind("ConfigMap")}
    claims = {d["metadata"]["name"] for d in _of_kind("PersistentVolumeClaim")}
    namespaces = {d["metadata"]["name"] for d in _of_kind("Namespace")}
    for doc in DOCS:
        assert doc["kind"] == "Namespace" or doc["metadata"]["namespace"] in namespaces
    for deployment in _of_kind("Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        container = _container(deployment)
        refs = [e["configMapRef"]["name"] for e in container.get("envFrom", []) if "configMapRef" in e]
        assert set(refs) <= config_maps
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert {m["name"] for m in container["volumeMounts"]} <= set(volumes)
        assert volumes["models"]["persistentVolumeClaim"]["claimName"] in claims
        keys = {k for name in refs for k in _named("ConfigMap", name)["data"]}
        env = {e["name"] for e in container.get("env", [])}
        assert set(re.findall(r"\$\((\w+)\)", " ".join(container["args"]))) <= keys | env  # $(VAR)s are defined


def _unit_command(path: Path) -> list[str]:
    """The unit's ExecStart with its Environment= defaults and specifiers filled in, as `zoo` gets it."""
    text = path.read_text()
    env = {}
    for value in re.findall(r"^Environment=(.*)$", text, re.M):
        for item in shlex.split(value):
            key, _, val = item.partition("=")
            env[key] = val
    (exec_start,) = re.findall(r"^ExecStart=(.*)$", text, re.M)
    exec_start = exec_start.replace("%i", "0").replace("%l", "host")
    words = []
    for word in shlex.split(exec_start):
        if re.fullmatch(r"\$(\w+)", word):  # $VAR: split into words (systemd's rule)
            words += env[word[1:]].split()
        else:
            words.append(re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], word))
    return words


@pytest.mark.parametrize("unit", ["zoo-controlplane.service", "zoo-agent@.service"])
def test_systemd_units_run_a_valid_zoo_command(unit):
    command = _unit_command(DEPLOY / "systemd" / unit)
    assert command[0] == "/opt/silicon-zoo/bin/zoo"
    args = build_parser().parse_args(command[1:])
    if command[1] == "agent":
        assert args.metrics_port == 0 and args.node_id == "host-gpu0" and args.device == "cuda"
    else:  # SIGTERM drains within systemd's stop timeout, before its SIGKILL
        stop_s = float(re.search(r"^TimeoutStopSec=(\d+)$", (DEPLOY / "systemd" / unit).read_text(), re.M).group(1))
        assert 0 < args.shutdown_timeout < stop_s
        text = (DEPLOY / "systemd" / unit).read_text()  # `systemctl reload`: SIGHUP re-reads the keys and the knobs
        assert re.findall(r"^ExecReload=(.*)$", text, re.M) == ["/bin/kill -HUP $MAINPID"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_units_verify(tmp_path):
    zoo = Path(sys.executable).with_name("zoo")  # an executable stands in for /opt/silicon-zoo/bin/zoo
    for unit in (DEPLOY / "systemd").glob("*.service"):
        (tmp_path / unit.name).write_text(unit.read_text().replace("/opt/silicon-zoo/bin/zoo", str(zoo)))
    names = [str(tmp_path / "zoo-controlplane.service"), str(tmp_path / "zoo-agent@0.service")]
    result = subprocess.run(["systemd-analyze", "verify", "--man=no", *names], capture_output=True, text=True)
    assert result.returncode == 0 and not result.stderr.strip() and not result.stdout.strip(), result.stderr


def test_the_image_has_cpu_and_cuda_variants_and_no_model():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^ARG VARIANT=cpu$", dockerfile, re.M)
    assert re.search(r"^\s+cpu\)\s.*download\.pytorch\.org/whl/cpu", dockerfile, re.M)
    assert re.search(r"^\s+cuda\)\s", dockerfile, re.M)
    assert re.search(r'^ENTRYPOINT \["zoo"\]$', dockerfile, re.M) and 'VOLUME ["/models"]' in dockerfile
    assert re.search(r"^ARG WITH_DEFAULT_MODEL=0$", dockerfile, re.M)  # no model unless asked for
    assert not re.search(r"^(COPY|ADD)\b.*\.(gguf|safetensors)", dockerfile, re.M | re.I)
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    assert {"**/*.gguf", "**/*.safetensors", ".venv", "tests"} <= set(ignored)
    exposed = {int(p) for line in re.findall(r"^EXPOSE (.*)$", dockerfile, re.M) for p in line.split()}
    ports = {p["containerPort"] for d in _of_kind("Deployment") for p in _container(d)["ports"]}
    assert ports <= exposed
    images = {_container(d)["image"].rsplit("-", 1)[1] for d in _of_kind("Deployment")}
    assert images == {"cpu", "cuda"}  # the control plane needs no GPU; agents run the CUDA variant


def test_prometheus_finds_agents_through_the_control_planes_discovery():
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    (sd,) = jobs["zoo-agents"]["http_sd_configs"]
    assert sd["url"].endswith(SD_PATH)


def test_the_generated_monitoring_manifests_are_up_to_date():
    """deploy/k8s/41-alerts.yaml and 42-grafana-dashboard.yaml are what scripts/render_k8s_monitoring.py makes of
    their sources now (the rules file, the dashboard)."""
    result = subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "render_k8s_monitoring.py"), "--check"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_grafana_loads_the_dashboard_in_kubernetes_and_on_bare_metal():
    dashboard = json.loads((REPO_ROOT / "observe" / "grafana" / "silicon_zoo.json").read_text())
    config_map = _named("ConfigMap", "zoo-grafana-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"  # the chart's sidecar label
    (text,) = config_map["data"].values()
    assert json.loads(text) == dashboard
    assert len(json.dumps(config_map)) < 256 * 1024  # kubectl apply's last-applied annotation limit
    # bare metal: Grafana's provisioning files, a Prometheus data source and a file provider
    grafana = DEPLOY / "grafana" / "provisioning"
    (source,) = yaml.safe_load((grafana / "datasources" / "silicon_zoo.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["access"] == "proxy"
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["global"]["scrape_interval"]
    assert source["jsonData"]["timeInterval"] == scrape
    (provider,) = yaml.safe_load((grafana / "dashboards" / "silicon_zoo.yml").read_text())["providers"]
    assert provider["type"] == "file" and provider["options"]["path"].startswith("/")
    # the dashboard asks for its data source by a variable of type datasource, so the provisioned one fits
    (variable,) = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert variable["query"] == "prometheus"
