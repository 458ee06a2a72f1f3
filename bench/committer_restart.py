"""What a committer's restart costs: the first conversion after a start reads the manifests again.

A committer keeps the manifests it has read in memory, so each commit reads
only the manifests added since the last one; after a start, its first commit
that converts equality deletes reads the table's manifests once more. This
measures that first conversion against the same conversion with the manifests
already in memory (every later commit), for tables of ``--files`` data files
of 10 keys each, in manifests of 50 files, on a local warehouse and on an S3
warehouse (moto's server on 127.0.0.1: real HTTP requests, none of an object
store's latency, so the S3 figures are a floor). The checkpoint upserts 10
keys of the newest file, as a stream updating recent rows does.

The same table partitioned by ``truncate(500, id)`` shows what partition
summaries save after a start: the checkpoint's deletes reach the manifests of
one partition, and the others are not read.

    .venv/bin/python bench/committer_restart.py [--files 2000,10000] [--stores local,S3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
from figures import record_values

from icesink.catalog.config import CatalogConfig
from icesink.catalog.loader import open_catalog
from icesink.iceberg.describe import writer_spec
from icesink.iceberg.manifests import to_data_file
from icesink.paths import file_uri
from icesink.writer.spec import ChangeSpec
from icesink.writer.task import TaskWriter

PER_MANIFEST = 50
KEYS_PER_FILE = 10
S3_KEY, S3_SECRET = "bench", "bench-secret"


def create(config: CatalogConfig, name: str, partitioned: bool) -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from icesink.sink.tables import parse_partition_by

    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "v", StringType(), required=False),
        identifier_field_ids=[1],
    )
    catalog = open_catalog(config)
    catalog.create_namespace_if_not_exists("bench")
    spec = parse_partition_by(name, schema, ("truncate(500, id)",) if partitioned else ())
    return catalog.create_table(name, schema, partition_spec=spec)


def fill(config: CatalogConfig, name: str, files: int) -> None:
    """``files`` data files of 10 ordered keys each, appended 50 files (one manifest) at a time."""
    table = open_catalog(config).load_table(name)
    for first in range(0, files, PER_MANIFEST):
        spec = writer_spec(table, name, "bench").for_checkpoint(first)
        records = []
        for number in range(first, min(first + PER_MANIFEST, files)):
            keys = range(number * KEYS_PER_FILE, (number + 1) * KEYS_PER_FILE)
            writer = TaskWriter(spec, number, 0)
            writer.write(pa.table({"id": pa.array(keys, pa.int64()), "v": [f"v{k}" for k in keys]}))
            records.extend(writer.complete().data_files)
        with table.transaction() as transaction, transaction.update_snapshot().fast_append() as append:
            for record in records:
                append.append_data_file(to_data_file(record, table.metadata.format_version))
        table = open_catalog(config).load_table(name)


def staged_deletes(config: CatalogConfig, name: str, keys: range) -> list[Any]:
    """The equality delete file of a checkpoint upserting ``keys`` (written as a stream's task writes it)."""
    table = open_catalog(config).load_table(name)
    changes = ChangeSpec(equality_field_ids=(1,), op_column="op")
    writer = TaskWriter(writer_spec(table, name, "upserts", changes).for_checkpoint(10**6), 0, 0)
    writer.write(
        pa.table(
            {
                "id": pa.array(keys, pa.int64()),
                "v": ["new"] * len(keys),
                "op": ["U"] * len(keys),
                "__icesink_order": pa.array(range(len(keys)), pa.int64()),
            }
        )
    )
    return [to_data_file(r, table.metadata.format_version) for r in writer.complete().delete_files]


def conversion_seconds(config: CatalogConfig, name: str, deletes: list[Any], cache: Any) -> float:
    from icesink.maintenance.convert import convert_for_commit
    from icesink.maintenance.policy import MaintenancePolicy

    table = open_catalog(config).load_table(name)
    policy = MaintenancePolicy.of(table.properties, name)
    started = time.perf_counter()
    conversion = convert_for_commit(table, deletes, policy, "bench", cache)
    seconds = time.perf_counter() - started
    assert conversion is not None and conversion.rows == KEYS_PER_FILE, conversion
    return seconds


def measure(config: CatalogConfig, files: int, repeat: int) -> dict[str, float]:
    from icesink.iceberg.scan import ManifestCache

    found: dict[str, float] = {}
    newest = range((files - 1) * KEYS_PER_FILE, files * KEYS_PER_FILE)
    for partitioned in (False, True):
        name = f"bench.t_{files}_{int(partitioned)}"
        create(config, name, partitioned)
        fill(config, name, files)
        deletes = staged_deletes(config, name, newest)
        way = "after a start, partitioned" if partitioned else "after a start"
        found[way] = statistics.median(
            conversion_seconds(config, name, deletes, ManifestCache()) for _ in range(repeat)
        )
        if not partitioned:
            cache = ManifestCache()
            conversion_seconds(config, name, deletes, cache)
            found["later commits"] = statistics.median(
                conversion_seconds(config, name, deletes, cache) for _ in range(repeat)
            )
    return found


def moto_server(work: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = open(work / "moto.log", "ab")  # noqa: SIM115 - open for the server's life
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                server.kill()
                raise SystemExit("moto's S3 server did not start") from None
            time.sleep(0.2)


def s3_config(work: Path, endpoint: str) -> CatalogConfig:
    import pyarrow.fs as pafs

    bucket = f"bench-{uuid.uuid4().hex[:8]}"
    pafs.S3FileSystem(
        access_key=S3_KEY,
        secret_key=S3_SECRET,
        region="us-east-1",
        scheme="http",
        endpoint_override=endpoint,
        allow_bucket_creation=True,
    ).create_dir(bucket)
    properties = {
        "s3.endpoint": f"http://{endpoint}",
        "s3.access-key-id": S3_KEY,
        "s3.secret-access-key": S3_SECRET,
        "s3.region": "us-east-1",
    }
    return CatalogConfig(
        "bench", f"sqlite:///{work / 's3.db'}", f"s3://{bucket}/wh", embedded=True, properties=properties
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", default="2000,10000", help="data files of the tables, comma-separated")
    parser.add_argument("--stores", default="local,S3", help="where the tables are: local, S3 or both")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="icesink-bench-restart-") as temporary:
        work = Path(temporary)
        server, endpoint = moto_server(work)
        try:
            stores = {
                "local": CatalogConfig("bench", f"sqlite:///{work / 'local.db'}", file_uri(work / "wh"), embedded=True),
                "S3": s3_config(work, endpoint),
            }
            updates: dict[str, dict[str, float]] = {}
            for store, config in ((s, stores[s]) for s in args.stores.split(",")):
                for files in (int(f) for f in args.files.split(",")):
                    found = measure(config, files, args.repeat)
                    group = f"{files:,} files, {store}"
                    for way, seconds in found.items():
                        updates.setdefault(way, {})[group] = round(seconds, 3)
                    shown = ", ".join(f"{way} {seconds:.3f} s" for way, seconds in found.items())
                    print(f"{group}: {shown}", flush=True)
        finally:
            server.terminate()
            server.wait(10)
    command = f"bench/committer_restart.py --files {args.files} --stores {args.stores} --repeat {args.repeat}"
    record_values("committer_restart", updates, command)


if __name__ == "__main__":
    main()
