"""Drives a tandem cluster with the official Kubernetes Python client (`kubernetes` on PyPI).

Run by crates/tandem/tests/e2e_python.rs against `tandem up` with emulated nodes; KUBECONFIG
names the cluster. Each check prints `ok <name>`; the first failure raises and the script exits
non-zero with the client's own exception. Everything waits with a bounded deadline.
"""

import json
import sys
import threading
import time

from kubernetes import client, config, dynamic, watch
from kubernetes.client.rest import ApiException
from kubernetes.stream import stream

NS = "py-suite"
DEADLINE = 60


def ok(name):
    print(f"ok {name}", flush=True)


def eventually(what, fn, timeout=DEADLINE):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            value = fn()
            if value:
                return value
        except ApiException as e:
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last error: {last})")


def expect_status(call, code, reason, message=None):
    """Calls `call`, which must fail with a Status of this code, reason and message."""
    try:
        call()
    except ApiException as e:
        body = json.loads(e.body)
        assert e.status == code, (e.status, e.body)
        assert body["kind"] == "Status" and body["reason"] == reason, e.body
        if message is not None:
            assert body["message"] == message, (body["message"], message)
        return body
    raise AssertionError(f"expected {code} {reason}")


def core_objects(v1):
    v1.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NS)))
    ok("create namespace")
    cm = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="settings", labels={"app": "suite"}),
        data={"greeting": "hello"},
    )
    created = v1.create_namespaced_config_map(NS, cm)
    assert created.metadata.uid and created.metadata.resource_version
    ok("create configmap")

    got = v1.read_namespaced_config_map("settings", NS)
    assert got.data == {"greeting": "hello"}, got.data
    listed = v1.list_namespaced_config_map(NS, label_selector="app=suite")
    assert [i.metadata.name for i in listed.items] == ["settings"], listed.items
    assert v1.list_namespaced_config_map(NS, label_selector="app=other").items == []
    ok("get and list with a label selector")

    # A dict body is a strategic merge patch for this client; a list body is a JSON patch.
    v1.patch_namespaced_config_map("settings", NS, {"data": {"extra": "1"}})
    v1.patch_namespaced_config_map(
        "settings", NS, [{"op": "replace", "path": "/data/greeting", "value": "hi"}]
    )
    got = v1.read_namespaced_config_map("settings", NS)
    assert got.data == {"greeting": "hi", "extra": "1"}, got.data
    ok("strategic merge and JSON patches")

    # The texts the client's own tests compare: upstream's conflict and not-found messages.
    stale = created
    stale.data = {"greeting": "stale"}
    expect_status(
        lambda: v1.replace_namespaced_config_map("settings", NS, stale),
        409,
        "Conflict",
        'Operation cannot be fulfilled on configmaps "settings": the object has been '
        "modified; please apply your changes to the latest version and try again",
    )
    expect_status(
        lambda: v1.create_namespaced_config_map(NS, cm),
        409,
        "AlreadyExists",
        'configmaps "settings" already exists',
    )
    expect_status(
        lambda: v1.read_namespaced_config_map("missing", NS),
        404,
        "NotFound",
        'configmaps "missing" not found',
    )
    bad = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="Not_Valid"))
    body = expect_status(lambda: v1.create_namespaced_config_map(NS, bad), 422, "Invalid")
    assert body["details"]["causes"][0]["field"] == "metadata.name", body
    ok("conflict, already-exists, not-found and invalid Status bodies")

    # Paging: limit and continue.
    for i in range(5):
        v1.create_namespaced_secret(
            NS,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name=f"s{i}", labels={"page": "yes"}),
                string_data={"k": str(i)},
            ),
        )
    names, token = [], None
    while True:
        page = v1.list_namespaced_secret(NS, label_selector="page=yes", limit=2, _continue=token)
        names += [s.metadata.name for s in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert names == [f"s{i}" for i in range(5)], names
    ok("paged list with limit and continue")


def watches(v1):
    start = v1.list_namespaced_config_map(NS).metadata.resource_version

    def later():
        time.sleep(0.5)
        v1.create_namespaced_config_map(
            NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="watched"))
        )
        v1.delete_namespaced_config_map("watched", NS)

    threading.Thread(target=later, daemon=True).start()
    seen = []
    w = watch.Watch()
    # The stream ends at the server's timeout: the client must see a properly ended response
    # (no "Response ended prematurely").
    for event in w.stream(
        v1.list_namespaced_config_map, NS, resource_version=start, timeout_seconds=3
    ):
        seen.append((event["type"], event["object"].metadata.name))
    assert ("ADDED", "watched") in seen and ("DELETED", "watched") in seen, seen
    ok("watch from a resourceVersion until the server's timeout")


def workloads(v1, apps):
    labels = {"app": "web"}
    deployment = client.V1Deployment(
        metadata=client.V1ObjectMeta(name="web"),
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels=labels),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels=labels),
                spec=client.V1PodSpec(
                    node_selector={"kubernetes.io/os": "linux"},
                    containers=[client.V1Container(name="web", image="tandem.local/busybox:1")],
                ),
            ),
        ),
    )
    apps.create_namespaced_deployment(NS, deployment)
    eventually(
        "the deployment available",
        lambda: (apps.read_namespaced_deployment_status("web", NS).status.available_replicas or 0)
        == 2,
    )
    ok("deployment becomes available")

    scale = apps.read_namespaced_deployment_scale("web", NS)
    assert scale.spec.replicas == 2
    apps.patch_namespaced_deployment_scale("web", NS, {"spec": {"replicas": 3}})
    eventually(
        "three pods",
        lambda: len(v1.list_namespaced_pod(NS, label_selector="app=web").items) == 3,
    )
    ok("scale subresource")

    pod = v1.list_namespaced_pod(NS, label_selector="app=web").items[0].metadata.name
    eventually(
        "the pod running",
        lambda: v1.read_namespaced_pod(pod, NS).status.phase == "Running",
    )
    out = stream(
        v1.connect_get_namespaced_pod_exec,
        pod,
        NS,
        command=["echo", "from-python"],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
    )
    assert "from-python" in out, out
    ok("exec over the websocket protocol")
    # An emulated node runs no processes: asking for logs gets a clear 400 saying so.
    body = expect_status(lambda: v1.read_namespaced_pod_log(pod, NS), 400, "BadRequest")
    assert "emulated" in body["message"], body
    ok("pod logs refused on an emulated node, saying why")


def custom_resources(ext, custom):
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.suite.tandem.test"},
        "spec": {
            "group": "suite.tandem.test",
            "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer", "maximum": 10}},
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {"ready": {"type": "boolean"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }
    ext.create_custom_resource_definition(crd)

    def established():
        conditions = ext.read_custom_resource_definition("gadgets.suite.tandem.test").status.conditions
        return any(c.type == "Established" and c.status == "True" for c in conditions or [])

    eventually("the CRD established", established)
    group, version, plural = "suite.tandem.test", "v1", "gadgets"
    eventually(
        "gadgets served",
        lambda: custom.list_namespaced_custom_object(group, version, NS, plural) is not None,
    )
    gadget = {
        "apiVersion": "suite.tandem.test/v1",
        "kind": "Gadget",
        "metadata": {"name": "g1"},
        "spec": {"size": 3},
    }
    custom.create_namespaced_custom_object(group, version, NS, plural, gadget)
    got = custom.get_namespaced_custom_object(group, version, NS, plural, "g1")
    assert got["spec"] == {"size": 3}, got
    custom.patch_namespaced_custom_object(group, version, NS, plural, "g1", {"spec": {"size": 4}})
    custom.patch_namespaced_custom_object_status(
        group, version, NS, plural, "g1", {"status": {"ready": True}}
    )
    got = custom.get_namespaced_custom_object(group, version, NS, plural, "g1")
    assert got["spec"] == {"size": 4} and got["status"] == {"ready": True}, got
    listed = custom.list_namespaced_custom_object(group, version, NS, plural)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["g1"], listed
    too_big = dict(gadget, metadata={"name": "g2"}, spec={"size": 11})
    body = expect_status(
        lambda: custom.create_namespaced_custom_object(group, version, NS, plural, too_big),
        422,
        "Invalid",
    )
    assert body["details"]["causes"][0]["field"] == "spec.size", body
    ok("custom objects: create, get, merge patch, status, list, schema validation")


def discovery_and_dynamic(api_client):
    dyn = dynamic.DynamicClient(api_client)
    configmaps = dyn.resources.get(api_version="v1", kind="ConfigMap")
    names = [i.metadata.name for i in configmaps.get(namespace=NS).items]
    assert "settings" in names, names
    gadgets = dyn.resources.get(api_version="suite.tandem.test/v1", kind="Gadget")
    assert [i.metadata.name for i in gadgets.get(namespace=NS).items] == ["g1"]
    ok("dynamic client over discovery")


def cleanup(v1):
    v1.delete_namespace(NS)

    def gone():
        try:
            v1.read_namespace(NS)
        except ApiException as e:
            return e.status == 404
        return False

    eventually("the namespace deleted", gone, timeout=90)
    ok("namespace deletion finishes")


def main():
    config.load_kube_config()
    api_client = client.ApiClient()
    v1 = client.CoreV1Api(api_client)
    version = client.VersionApi(api_client).get_code()
    assert version.major == "1", version
    ok("version")
    core_objects(v1)
    watches(v1)
    workloads(v1, client.AppsV1Api(api_client))
    custom_resources(client.ApiextensionsV1Api(api_client), client.CustomObjectsApi(api_client))
    discovery_and_dynamic(api_client)
    cleanup(v1)
    print("all checks passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
