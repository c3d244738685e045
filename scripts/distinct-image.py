#!/usr/bin/env python3
"""Writes an OCI archive of SOURCE's (single) image with an image ID of its own, named NAME.

Usage: scripts/distinct-image.py SOURCE.tar OUT.tar NAME [LAYER_BYTES]

The image config gets one more Env entry (TANDEM_DISTINCT=NAME); with LAYER_BYTES > 0 a layer
holding a file of that many random bytes (/tandem-distinct) is added, so that pulling the image
transfers data no other image shares. Used by the image tests and `tandem bench pull`.
"""
import gzip, hashlib, io, json, os, sys, tarfile

src, out, name = sys.argv[1:4]
layer_bytes = int(sys.argv[4]) if len(sys.argv) > 4 else 0
with tarfile.open(src) as t:
    files = {m.name.lstrip("./"): t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


def blob(digest):
    return files["blobs/sha256/" + digest.split(":", 1)[1]]


def add(data):
    d = hashlib.sha256(data).hexdigest()
    files["blobs/sha256/" + d] = data
    return "sha256:" + d, len(data)


index = json.loads(files["index.json"])
manifest = json.loads(blob(index["manifests"][0]["digest"]))
config = json.loads(blob(manifest["config"]["digest"]))
config["config"].setdefault("Env", []).append("TANDEM_DISTINCT=" + name)
if layer_bytes > 0:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as layer:
        info = tarfile.TarInfo("tandem-distinct")
        info.size = layer_bytes
        layer.addfile(info, io.BytesIO(os.urandom(layer_bytes)))
    diff_id = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
    digest, size = add(gzip.compress(raw.getvalue(), mtime=0))
    config["rootfs"]["diff_ids"].append(diff_id)
    manifest["layers"].append(
        {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest, "size": size}
    )
manifest["config"]["digest"], manifest["config"]["size"] = add(json.dumps(config).encode())
entry = index["manifests"][0]
entry["digest"], entry["size"] = add(json.dumps(manifest).encode())
entry["annotations"] = {
    "io.containerd.image.name": name,
    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
}
files["index.json"] = json.dumps(index).encode()
with tarfile.open(out, "w") as t:
    for path, data in sorted(files.items()):
        info = tarfile.TarInfo(path)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
