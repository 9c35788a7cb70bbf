"""HTTPS on the gateway (GatewayConfig.ssl_*, `zoo controlplane --ssl-keyfile/--ssl-certfile/--ssl-ca-certs/
--ssl-cert-reqs`, vLLM's flags): served over TLS with a certificate a client can verify, plain HTTP refused there,
client certificates required when asked (mutual TLS), and a bad key, certificate or combination refused at start."""

from __future__ import annotations

import argparse
import contextlib
import json
import ssl

import anyio
import httpx
import pytest
import trustme

from controlplane.gateway import create_app
from controlplane.gateway.app import GatewayConfig
from controlplane.gateway.http_server import serve_gateway
from zoo.serve import add_controlplane_args, gateway_config_from_args


@pytest.fixture
def pki(tmp_path):
    """A CA, the gateway's certificate for 127.0.0.1 (key and chain files) and a client certificate."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    server.private_key_pem.write_to_path(tmp_path / "key.pem")
    server.cert_chain_pems[0].write_to_path(tmp_path / "cert.pem")
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    return ca, tmp_path


@contextlib.asynccontextmanager
async def _serving(frontend, config: GatewayConfig):
    async with anyio.create_task_group() as tg:
        server = await tg.start(serve_gateway, create_app(frontend, config=config), "127.0.0.1", 0, config)
        try:
            yield server.servers[0].sockets[0].getsockname()[1]
        finally:
            tg.cancel_scope.cancel()


def _tls_config(tmp_path, **more) -> GatewayConfig:
    return GatewayConfig(ssl_keyfile=str(tmp_path / "key.pem"), ssl_certfile=str(tmp_path / "cert.pem"), **more)


@pytest.mark.anyio
async def test_the_gateway_answers_over_tls_and_refuses_plain_http_there(frontend, pki):
    ca, path = pki
    verified = ssl.create_default_context()
    ca.configure_trust(verified)
    async with _serving(frontend, _tls_config(path)) as port:
        async with httpx.AsyncClient(verify=verified, timeout=10) as c:
            health = await c.get(f"https://127.0.0.1:{port}/health")
            completion = await c.post(
                f"https://127.0.0.1:{port}/v1/completions", json={"model": "smol", "prompt": "hi", "max_tokens": 3}
            )
        assert health.status_code == 200 and completion.json()["choices"][0]["text"] == "Hello, world"
        async with httpx.AsyncClient(timeout=10) as c:
            with pytest.raises(httpx.HTTPError):
                await c.get(f"http://127.0.0.1:{port}/health")  # plain HTTP on the TLS port: no answer
            with pytest.raises(httpx.ConnectError):  # a client that does not trust the CA refuses the gateway
                await c.get(f"https://127.0.0.1:{port}/health")


@pytest.mark.anyio
async def test_mutual_tls_requires_a_client_certificate_from_the_ca(frontend, pki):
    ca, path = pki
    config = _tls_config(path, ssl_ca_certs=str(path / "ca.pem"), ssl_cert_reqs=ssl.CERT_REQUIRED)
    without = ssl.create_default_context()
    ca.configure_trust(without)
    with_cert = ssl.create_default_context()
    ca.configure_trust(with_cert)
    ca.issue_cert("app@example.com").configure_cert(with_cert)
    async with _serving(frontend, config) as port:
        async with httpx.AsyncClient(verify=with_cert, timeout=10) as c:
            assert (await c.get(f"https://127.0.0.1:{port}/health")).status_code == 200
        async with httpx.AsyncClient(verify=without, timeout=10) as c:
            with pytest.raises(httpx.HTTPError):  # the handshake fails, or the connection drops right after it
                await c.get(f"https://127.0.0.1:{port}/health")


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"ssl_keyfile": "k.pem"}, "together"),
        ({"ssl_certfile": "c.pem"}, "together"),
        ({"ssl_keyfile": "k.pem", "ssl_certfile": "c.pem", "ssl_cert_reqs": 5}, "ssl_cert_reqs"),
        ({"ssl_keyfile": "k.pem", "ssl_certfile": "c.pem", "ssl_cert_reqs": 2}, "ssl_ca_certs"),
        ({"ssl_ca_certs": "ca.pem"}, "ssl_certfile"),
    ],
)
def test_a_config_that_cannot_serve_tls_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        GatewayConfig(**fields)


def _args(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_controlplane_args(parser)
    return parser.parse_args(list(flags))


def test_the_flags_and_a_bad_file_refused_by_name_at_start(pki):
    _, path = pki
    config = gateway_config_from_args(
        _args("--ssl-keyfile", str(path / "key.pem"), "--ssl-certfile", str(path / "cert.pem"))
    )
    assert (config.ssl_keyfile, config.ssl_certfile, config.ssl_cert_reqs) == (
        str(path / "key.pem"),
        str(path / "cert.pem"),
        ssl.CERT_NONE,
    )
    with pytest.raises(SystemExit, match="--ssl-certfile"):
        gateway_config_from_args(_args("--ssl-keyfile", str(path / "key.pem"), "--ssl-certfile", str(path / "no.pem")))
    (path / "bad.pem").write_text("not a certificate")
    with pytest.raises(SystemExit, match="--ssl-certfile"):
        gateway_config_from_args(_args("--ssl-keyfile", str(path / "key.pem"), "--ssl-certfile", str(path / "bad.pem")))
    with pytest.raises(SystemExit, match="--ssl-keyfile"):  # a key that does not match the certificate
        other = trustme.CA().issue_cert("127.0.0.1")
        other.private_key_pem.write_to_path(path / "other-key.pem")
        flags = ("--ssl-keyfile", str(path / "other-key.pem"), "--ssl-certfile", str(path / "cert.pem"))
        gateway_config_from_args(_args(*flags))


@pytest.mark.anyio
async def test_zoo_batch_runs_a_file_over_mutual_tls(frontend, pki, tmp_path):
    from zoo.batch_cmd import add_batch_args, run_batch

    ca, path = pki
    ca.issue_cert("batch-client").private_key_and_cert_chain_pem.write_to_path(path / "client.pem")
    line = {"custom_id": "q", "method": "POST", "url": "/v1/completions", "body": {"model": "smol", "prompt": "hi"}}
    (tmp_path / "in.jsonl").write_text(json.dumps(line) + "\n")
    config = _tls_config(path, ssl_ca_certs=str(path / "ca.pem"), ssl_cert_reqs=ssl.CERT_REQUIRED)
    parser = argparse.ArgumentParser()
    add_batch_args(parser)
    async with _serving(frontend, config) as port:
        flags = [str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"), "--url", f"https://127.0.0.1:{port}"]
        flags += ["--cacert", str(path / "ca.pem"), "--poll-s", "0.05"]
        without_cert = parser.parse_args(flags)
        assert await anyio.to_thread.run_sync(run_batch, without_cert) == 2  # it asks for a client certificate
        with_cert = parser.parse_args([*flags, "--cert", str(path / "client.pem")])
        code = await anyio.to_thread.run_sync(run_batch, with_cert)
    assert code == 0
    (answer,) = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert answer["custom_id"] == "q" and answer["response"]["status_code"] == 200
