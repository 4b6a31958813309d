#!/usr/bin/env python3
"""Schema-only stand-in for the OpenNebula Terraform provider, for offline tests.

The Terraform registry is unreachable in CI, so `terraform init` cannot download OpenNebula/opennebula.
This program speaks plugin protocol 6 (go-plugin handshake over a Unix socket with TLS) and serves the
provider schema kept in `opennebula-provider-schema.json` (transcribed from the provider's source, see
README.md). That is all `terraform init`, `terraform validate` and `terraform test` with
`mock_provider "opennebula"` need: Terraform checks every argument against the schema, and the mock
replaces planning and applying. Any call that would touch a real cloud (plan, apply, read, import) is
answered UNIMPLEMENTED.

    stub_provider.py                 as a plugin: Terraform starts it (installed from a filesystem_mirror)
    stub_provider.py --reattach DIR  long-running: prints a TF_REATTACH_PROVIDERS value, serves until SIGTERM

Runs with a Python that has the PyPI packages `tf` (generated tfplugin6 protobufs), grpcio and
cryptography; `infra/testing/requirements.txt` pins them.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import signal
import sys
import tempfile
import threading
from concurrent import futures

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from tf.gen import grpc_controller_pb2, grpc_controller_pb2_grpc, tfplugin_pb2, tfplugin_pb2_grpc

SCHEMA_FILE = os.environ.get(
    "STUB_PROVIDER_SCHEMA",
    os.path.join(os.path.dirname(os.path.realpath(__file__)), "opennebula-provider-schema.json"),
)
PROTOCOL_VERSION = "6"
PROVIDER_ADDRESS = "registry.terraform.io/opennebula/opennebula"
NESTING = {
    "single": tfplugin_pb2.Schema.NestedBlock.SINGLE,
    "list": tfplugin_pb2.Schema.NestedBlock.LIST,
    "set": tfplugin_pb2.Schema.NestedBlock.SET,
    "map": tfplugin_pb2.Schema.NestedBlock.MAP,
    "group": tfplugin_pb2.Schema.NestedBlock.GROUP,
}


def attribute_message(name: str, spec: dict) -> tfplugin_pb2.Schema.Attribute:
    """One attribute. `required_unless_env` mirrors the SDK's Required + EnvDefaultFunc: the real provider
    reports such an attribute as optional when the environment variable is set."""
    required = spec.get("required", False)
    optional = spec.get("optional", False)
    env_name = spec.get("required_unless_env")
    if required and env_name and os.environ.get(env_name):
        required, optional = False, True
    return tfplugin_pb2.Schema.Attribute(
        name=name,
        type=json.dumps(spec["type"]).encode(),
        description=spec.get("description", ""),
        required=required,
        optional=optional,
        computed=spec.get("computed", False),
        sensitive=spec.get("sensitive", False),
        deprecated=spec.get("deprecated", False),
    )


def block_message(block: dict) -> tfplugin_pb2.Schema.Block:
    attributes = [attribute_message(n, s) for n, s in sorted(block.get("attributes", {}).items())]
    nested = [
        tfplugin_pb2.Schema.NestedBlock(
            type_name=name,
            nesting=NESTING[spec["nesting_mode"]],
            block=block_message(spec["block"]),
            min_items=spec.get("min_items", 0),
            max_items=spec.get("max_items", 0),
        )
        for name, spec in sorted(block.get("block_types", {}).items())
    ]
    return tfplugin_pb2.Schema.Block(
        attributes=attributes, block_types=nested, deprecated=block.get("deprecated", False)
    )


def schema_message(schema: dict) -> tfplugin_pb2.Schema:
    return tfplugin_pb2.Schema(version=schema.get("version", 0), block=block_message(schema["block"]))


class SchemaOnlyProvider(tfplugin_pb2_grpc.ProviderServicer):
    """Answers the schema and validation calls; everything else keeps the generated UNIMPLEMENTED default."""

    def __init__(self, schema: dict):
        self.schema = schema

    def GetMetadata(self, request, context):
        return tfplugin_pb2.GetMetadata.Response(
            resources=[
                tfplugin_pb2.GetMetadata.ResourceMetadata(type_name=n)
                for n in self.schema["resource_schemas"]
            ],
            data_sources=[
                tfplugin_pb2.GetMetadata.DataSourceMetadata(type_name=n)
                for n in self.schema.get("data_source_schemas", {})
            ],
        )

    def GetProviderSchema(self, request, context):
        response = tfplugin_pb2.GetProviderSchema.Response(provider=schema_message(self.schema["provider"]))
        for name, schema in self.schema["resource_schemas"].items():
            response.resource_schemas[name].CopyFrom(schema_message(schema))
        for name, schema in self.schema.get("data_source_schemas", {}).items():
            response.data_source_schemas[name].CopyFrom(schema_message(schema))
        return response

    def ValidateProviderConfig(self, request, context):
        return tfplugin_pb2.ValidateProviderConfig.Response()

    def ValidateResourceConfig(self, request, context):
        return tfplugin_pb2.ValidateResourceConfig.Response()

    def ValidateDataResourceConfig(self, request, context):
        return tfplugin_pb2.ValidateDataResourceConfig.Response()

    def ConfigureProvider(self, request, context):
        return tfplugin_pb2.ConfigureProvider.Response()

    def StopProvider(self, request, context):
        return tfplugin_pb2.StopProvider.Response()


class Controller(grpc_controller_pb2_grpc.GRPCControllerServicer):
    """go-plugin's controller service: Terraform calls Shutdown when it is done with the plugin."""

    def __init__(self):
        self.shutdown_requested = threading.Event()

    def Shutdown(self, request, context):
        self.shutdown_requested.set()
        return grpc_controller_pb2.Empty()


def server_credentials() -> tuple[bytes, grpc.ServerCredentials]:
    """A throwaway self-signed certificate: go-plugin's AutoMTLS expects the server's certificate (DER,
    base64) in the handshake line and a TLS listener."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=12))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [x509.oid.ExtendedKeyUsageOID.SERVER_AUTH, x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    certificate_pem = certificate.public_bytes(serialization.Encoding.PEM)
    credentials = grpc.ssl_server_credentials([(key_pem, certificate_pem)], require_client_auth=False)
    return certificate.public_bytes(serialization.Encoding.DER), credentials


def serve(
    schema: dict, socket_path: str, credentials: grpc.ServerCredentials | None
) -> tuple[grpc.Server, Controller]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    tfplugin_pb2_grpc.add_ProviderServicer_to_server(SchemaOnlyProvider(schema), server)
    controller = Controller()
    grpc_controller_pb2_grpc.add_GRPCControllerServicer_to_server(controller, server)
    if credentials is None:
        server.add_insecure_port("unix://" + socket_path)
    else:
        server.add_secure_port("unix://" + socket_path, credentials)
    server.start()
    return server, controller


def run_as_plugin(schema: dict) -> None:
    """Started by Terraform: print the go-plugin handshake, serve until Terraform asks for shutdown."""
    with tempfile.TemporaryDirectory(prefix="tf-stub-provider-") as socket_dir:
        socket_path = os.path.join(socket_dir, "plugin.sock")
        certificate_der, credentials = server_credentials()
        server, controller = serve(schema, socket_path, credentials)
        certificate_b64 = base64.b64encode(certificate_der).decode().rstrip("=")
        # core protocol | app protocol | network | address | protocol | server certificate
        print(f"1|{PROTOCOL_VERSION}|unix|{socket_path}|grpc|{certificate_b64}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            controller.shutdown_requested.wait()
        server.stop(grace=None).wait()


def run_for_reattach(schema: dict, socket_dir: str) -> None:
    """Long-running mode: serve on a plain Unix socket and print the TF_REATTACH_PROVIDERS value. Every
    terraform command given that variable uses this one process instead of starting the plugin itself
    (a Python start per command costs about a second on a busy 2-core machine). Stops on SIGTERM."""
    socket_path = os.path.join(socket_dir, "plugin.sock")
    server, _ = serve(schema, socket_path, credentials=None)
    reattach = {
        PROVIDER_ADDRESS: {
            "Protocol": "grpc",
            "ProtocolVersion": int(PROTOCOL_VERSION),
            "Pid": os.getpid(),
            "Test": True,
            "Addr": {"Network": "unix", "String": socket_path},
        }
    }
    print(json.dumps(reattach), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with contextlib.suppress(KeyboardInterrupt):
        stop.wait()
    server.stop(grace=None).wait()


def main() -> int:
    with open(SCHEMA_FILE, encoding="utf-8") as schema_file:
        schema = json.load(schema_file)
    if len(sys.argv) == 3 and sys.argv[1] == "--reattach":
        run_for_reattach(schema, sys.argv[2])
    else:
        run_as_plugin(schema)
    return 0


if __name__ == "__main__":
    sys.exit(main())
