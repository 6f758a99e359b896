"""A GitHub stand-in for tests: the REST endpoints Zodex calls and git smart HTTP, over TLS
with a test CA, in a thread of the test process so a test can read and change its state.

What it holds to GitHub's documented shapes and rules (docs.github.com/rest):

- ``GET /app``, ``GET /app/installations/{id}``, ``GET /repos/{o}/{r}/installation`` and
  ``POST /app/installations/{id}/access_tokens`` need ``Authorization: Bearer <App JWT>``:
  RS256, verified against the App's public key, ``iss`` the App id, ``exp`` at most ten
  minutes after ``iat``. An installation token carries the permissions asked for, never more
  than the installation has.
- ``GET /repos/{o}/{r}`` and ``POST /repos/{o}/{r}/pulls`` need a token covering the repo
  (``pull_requests: write`` for the second); a pull's head branch must exist.
- ``POST /login/device/code`` and ``POST /login/oauth/access_token`` (Device Flow, on the web
  host): ``authorization_pending`` until the test calls :meth:`GitHub.approve`,
  :meth:`GitHub.deny` or :meth:`GitHub.expire`. ``DELETE /applications/{client_id}/token``
  revokes a user token (Basic ``client_id:client_secret``).
- ``/{o}/{r}.git/…``: the real ``git http-backend`` behind ``Basic x-access-token:<token>``;
  without it 401, a token not covering the repo 404 ``Repository not found.``, a push with a
  token lacking ``contents: write`` 403 ``Write access to repository not granted.``
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import ipaddress
import json
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import jwt
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

ZERO = "0" * 40
TOKEN_LIFETIME = 3600


def new_private_key_pem() -> bytes:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_pem(private_pem: bytes) -> bytes:
    key = serialization.load_pem_private_key(private_pem, password=None)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def write_test_ca(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 it signed: (ca.pem, cert.pem, key.pem)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Zodex test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    paths = (directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    paths[2].chmod(0o600)
    return paths


@dataclass
class App:
    id: int
    slug: str
    client_id: str
    client_secret: str
    private_key: bytes
    permissions: dict[str, str]


@dataclass
class Installation:
    id: int
    app_id: int
    account: str
    repos: set[str]
    permissions: dict[str, str]


@dataclass
class Token:
    value: str
    kind: str  # "installation" or "user"
    permissions: dict[str, str]
    repos: set[str] | None  # None: every repo of the installation (or the user's)
    expires: float
    installation: int | None = None


@dataclass
class DeviceCode:
    device_code: str
    user_code: str
    client_id: str
    expires: float
    state: str = "pending"  # pending, approved, denied, used
    repos: set[str] = field(default_factory=set)


@dataclass
class Pull:
    number: int
    repo: str
    title: str
    body: str
    head: str
    base: str
    draft: bool


@dataclass
class GitHub:
    root: Path
    url: str = ""
    ca_file: Path | None = None
    apps: dict[int, App] = field(default_factory=dict)
    installations: dict[int, Installation] = field(default_factory=dict)
    tokens: dict[str, Token] = field(default_factory=dict)
    device_codes: dict[str, DeviceCode] = field(default_factory=dict)
    pulls: list[Pull] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    revoked: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Set by a test: a push's POST waits for ``hold`` once it arrived (``held`` set), to
    # let the test kill its sender in the middle of a push.
    hold: threading.Event | None = None
    held: threading.Event = field(default_factory=threading.Event)

    # --- what a test sets up and reads back -------------------------------------------------

    def add_app(self, app_id: int, slug: str, permissions: dict[str, str]) -> App:
        app = App(
            app_id,
            slug,
            f"Iv1.{secrets.token_hex(8)}",
            secrets.token_hex(20),
            new_private_key_pem(),
            permissions,
        )
        self.apps[app_id] = app
        return app

    def install(self, app: App, installation_id: int, account: str, repos: set[str]) -> Installation:
        made = Installation(installation_id, app.id, account, set(repos), dict(app.permissions))
        self.installations[installation_id] = made
        return made

    def add_repo(self, repo: str, default_branch: str = "main") -> Path:
        """A bare repository with one commit on ``default_branch``."""
        bare = self.repo_path(repo)
        bare.parent.mkdir(parents=True, exist_ok=True)
        git("init", "--bare", "-q", "-b", default_branch, str(bare))
        seed = self.root / "seed" / repo
        seed.mkdir(parents=True)
        git("init", "-q", "-b", default_branch, str(seed))
        (seed / "README.md").write_text(f"# {repo}\n")
        git("-C", str(seed), "add", "README.md")
        git("-C", str(seed), "-c", "user.name=Stand-in", "-c", "user.email=s@example.invalid",
            "commit", "-q", "-m", "First commit")  # fmt: skip
        git("-C", str(seed), "push", "-q", str(bare), f"{default_branch}:refs/heads/{default_branch}")
        return bare

    def repo_path(self, repo: str) -> Path:
        return self.root / "repos" / f"{repo}.git"

    def refs(self, repo: str) -> dict[str, str]:
        done = git("-C", str(self.repo_path(repo)), "for-each-ref", "--format=%(refname) %(objectname)")
        return {name: oid for name, oid in (line.split(" ", 1) for line in done.splitlines() if line)}

    def approve(self, user_code: str, repos: set[str]) -> None:
        self._device(user_code).state = "approved"
        self._device(user_code).repos = set(repos)

    def deny(self, user_code: str) -> None:
        self._device(user_code).state = "denied"

    def expire(self, user_code: str) -> None:
        self._device(user_code).expires = 0.0

    def _device(self, user_code: str) -> DeviceCode:
        for code in self.device_codes.values():
            if code.user_code == user_code:
                return code
        raise KeyError(user_code)

    def expire_token(self, value: str) -> None:
        self.tokens[value].expires = 0.0

    def live_tokens(self) -> list[str]:
        now = time.time()
        return [t.value for t in self.tokens.values() if t.expires > now]

    # --- authentication ---------------------------------------------------------------------

    def app_from_jwt(self, request: Request) -> App | None:
        header = request.headers.get("authorization", "")
        if not header.startswith("Bearer "):
            return None
        raw = header.removeprefix("Bearer ")
        try:
            unverified = jwt.decode(raw, options={"verify_signature": False})
            app = self.apps.get(int(unverified["iss"]))
            if app is None:
                return None
            claims = jwt.decode(
                raw,
                public_key_pem(app.private_key),
                algorithms=["RS256"],
                options={"require": ["iat", "exp", "iss"]},
                leeway=60,
            )
        except (jwt.PyJWTError, KeyError, ValueError, TypeError):
            return None
        if int(claims["exp"]) - int(claims["iat"]) > 600 + 60:
            return None
        return app

    def token_from(self, request: Request) -> Token | None:
        header = request.headers.get("authorization", "")
        value = ""
        if header.startswith(("Bearer ", "token ")):
            value = header.split(" ", 1)[1]
        elif header.startswith("Basic "):
            try:
                user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            except ValueError:
                return None
            value = password if user == "x-access-token" else ""
        token = self.tokens.get(value)
        if token is None or token.expires <= time.time():
            return None
        return token

    def covers(self, token: Token, repo: str) -> bool:
        if token.kind == "installation":
            installation = self.installations.get(token.installation or 0)
            if installation is None or repo not in installation.repos:
                return False
        return token.repos is None or repo in token.repos

    def mint(
        self, kind: str, permissions: dict[str, str], repos: set[str] | None, installation: int | None
    ) -> Token:
        prefix = "ghs_" if kind == "installation" else "ghu_"
        token = Token(
            prefix + secrets.token_urlsafe(27),
            kind,
            permissions,
            repos,
            time.time() + TOKEN_LIFETIME,
            installation,
        )
        with self.lock:
            self.tokens[token.value] = token
        return token


def git(*args: str, input: bytes | None = None) -> str:
    done = subprocess.run(["git", *args], capture_output=True, check=True, input=input)
    return done.stdout.decode()


def _message(status: int, message: str) -> JSONResponse:
    return JSONResponse({"message": message, "documentation_url": "https://docs.github.com/rest"}, status)


def _iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _repo_object(hub: GitHub, repo: str) -> dict[str, Any]:
    owner, name = repo.split("/")
    head = (hub.repo_path(repo) / "HEAD").read_text().strip().removeprefix("ref: refs/heads/")
    return {
        "id": abs(hash(repo)) % 10**9,
        "name": name,
        "full_name": repo,
        "owner": {"login": owner, "type": "Organization"},
        "private": True,
        "html_url": f"{hub.url}/{repo}",
        "clone_url": f"{hub.url}/{repo}.git",
        "default_branch": head,
    }


def _installation_object(hub: GitHub, installation: Installation) -> dict[str, Any]:
    app = hub.apps[installation.app_id]
    return {
        "id": installation.id,
        "app_id": app.id,
        "app_slug": app.slug,
        "account": {"login": installation.account, "type": "Organization"},
        "repository_selection": "selected",
        "permissions": installation.permissions,
        "target_type": "Organization",
    }


def build_app(hub: GitHub) -> Starlette:
    async def get_app(request: Request) -> Response:
        app = hub.app_from_jwt(request)
        if app is None:
            return _message(401, "A JSON web token could not be decoded")
        return JSONResponse(
            {"id": app.id, "slug": app.slug, "client_id": app.client_id, "name": app.slug,
             "owner": {"login": "stand-in"}, "permissions": app.permissions, "events": []}
        )  # fmt: skip

    def installation_of(request: Request) -> Installation | Response:
        """The App's own installation the path names, or GitHub's refusal."""
        app = hub.app_from_jwt(request)
        if app is None:
            return _message(401, "A JSON web token could not be decoded")
        installation = hub.installations.get(int(request.path_params["installation_id"]))
        if installation is None or installation.app_id != app.id:
            return _message(404, "Not Found")
        return installation

    async def get_installation(request: Request) -> Response:
        installation = installation_of(request)
        if isinstance(installation, Response):
            return installation
        return JSONResponse(_installation_object(hub, installation))

    async def get_repo_installation(request: Request) -> Response:
        app = hub.app_from_jwt(request)
        if app is None:
            return _message(401, "A JSON web token could not be decoded")
        repo = f"{request.path_params['owner']}/{request.path_params['repo']}"
        for installation in hub.installations.values():
            if installation.app_id == app.id and repo in installation.repos:
                return JSONResponse(_installation_object(hub, installation))
        return _message(404, "Not Found")

    async def access_tokens(request: Request) -> Response:
        installation = installation_of(request)
        if isinstance(installation, Response):
            return installation
        body = json.loads(await request.body() or b"{}")
        asked = body.get("permissions") or dict(installation.permissions)
        levels = {"read": 1, "write": 2, "admin": 3}
        for name, level in asked.items():
            if levels.get(level, 9) > levels.get(installation.permissions.get(name, ""), 0):
                return _message(
                    422, f"The permissions requested are not granted to this installation: {name}"
                )
        repos: set[str] | None = None
        if "repositories" in body:
            repos = {f"{installation.account}/{name}" for name in body["repositories"]}
            if not repos <= installation.repos:
                return _message(
                    422,
                    "There is at least one repository that does not exist or is not accessible to the parent installation.",
                )
        token = hub.mint("installation", asked, repos, installation.id)
        return JSONResponse(
            {"token": token.value, "expires_at": _iso(token.expires), "permissions": asked,
             "repository_selection": "selected"},
            201,
        )  # fmt: skip

    def token_for_repo(request: Request) -> tuple[str, Token] | Response:
        """The path's repository and a live token covering it, or GitHub's refusal."""
        repo = f"{request.path_params['owner']}/{request.path_params['repo']}"
        token = hub.token_from(request)
        if token is None:
            return _message(401, "Bad credentials")
        if not hub.covers(token, repo) or not hub.repo_path(repo).exists():
            return _message(404, "Not Found")
        return repo, token

    async def get_repo(request: Request) -> Response:
        found = token_for_repo(request)
        if isinstance(found, Response):
            return found
        return JSONResponse(_repo_object(hub, found[0]))

    async def create_pull(request: Request) -> Response:
        found = token_for_repo(request)
        if isinstance(found, Response):
            return found
        repo, token = found
        if token.permissions.get("pull_requests") != "write":
            return _message(403, "Resource not accessible by integration")
        body = json.loads(await request.body() or b"{}")
        head, base, title = body.get("head", ""), body.get("base", ""), body.get("title", "")
        refs = hub.refs(repo)
        if not title or f"refs/heads/{head}" not in refs or f"refs/heads/{base}" not in refs:
            return JSONResponse(
                {"message": "Validation Failed", "errors": [{"resource": "PullRequest", "code": "invalid"}]},
                422,
            )
        with hub.lock:
            pull = Pull(
                len(hub.pulls) + 1, repo, title, body.get("body") or "", head, base, bool(body.get("draft"))
            )
            hub.pulls.append(pull)
        return JSONResponse(
            {"number": pull.number, "state": "open", "title": pull.title, "body": pull.body,
             "draft": pull.draft, "html_url": f"{hub.url}/{repo}/pull/{pull.number}",
             "url": f"{hub.url}/api/v3/repos/{repo}/pulls/{pull.number}",
             "head": {"ref": head, "sha": refs[f"refs/heads/{head}"]},
             "base": {"ref": base, "sha": refs[f"refs/heads/{base}"]}},
            201,
        )  # fmt: skip

    async def device_code(request: Request) -> Response:
        form = await request.form()
        client_id = str(form.get("client_id", ""))
        if not any(app.client_id == client_id for app in hub.apps.values()):
            return JSONResponse({"error": "incorrect_client_credentials"}, 200)
        code = DeviceCode(
            secrets.token_hex(20),
            f"{secrets.token_hex(2)}-{secrets.token_hex(2)}".upper(),
            client_id,
            time.time() + 900,
        )
        hub.device_codes[code.device_code] = code
        return JSONResponse(
            {"device_code": code.device_code, "user_code": code.user_code,
             "verification_uri": f"{hub.url}/login/device", "expires_in": 900, "interval": 1}
        )  # fmt: skip

    async def oauth_token(request: Request) -> Response:
        form = await request.form()
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:device_code":
            return JSONResponse({"error": "unsupported_grant_type"})
        code = hub.device_codes.get(str(form.get("device_code", "")))
        if code is None or code.client_id != form.get("client_id"):
            return JSONResponse({"error": "incorrect_device_code"})
        if code.expires <= time.time():
            return JSONResponse({"error": "expired_token"})
        if code.state == "pending":
            return JSONResponse({"error": "authorization_pending", "interval": 1})
        if code.state != "approved":
            return JSONResponse({"error": "access_denied"})
        code.state = "used"
        token = hub.mint("user", {"contents": "write", "pull_requests": "write"}, code.repos, None)
        return JSONResponse(
            {"access_token": token.value, "token_type": "bearer", "scope": "", "expires_in": TOKEN_LIFETIME}
        )

    async def revoke_user_token(request: Request) -> Response:
        client_id = request.path_params["client_id"]
        app = next((a for a in hub.apps.values() if a.client_id == client_id), None)
        header = request.headers.get("authorization", "")
        expected = (
            "Basic " + base64.b64encode(f"{client_id}:{app.client_secret if app else ''}".encode()).decode()
        )
        if app is None or header != expected:
            return _message(404, "Not Found")
        body = json.loads(await request.body() or b"{}")
        token = hub.tokens.pop(str(body.get("access_token", "")), None)
        if token is None:
            return _message(404, "Not Found")
        hub.revoked.append(token.value)
        return Response(status_code=204)

    async def smart_http(request: Request) -> Response:
        path = request.path_params["path"]
        owner, name, rest = _split_git_path(path)
        repo = f"{owner}/{name}"
        token = hub.token_from(request)
        if token is None:
            return Response("", 401, {"WWW-Authenticate": 'Basic realm="GitHub"'})
        if not hub.covers(token, repo) or not hub.repo_path(repo).exists():
            return Response("Repository not found.\n", 404, media_type="text/plain")
        pushing = rest == "git-receive-pack" or request.query_params.get("service") == "git-receive-pack"
        if pushing and token.permissions.get("contents") != "write":
            return Response("Write access to repository not granted.\n", 403, media_type="text/plain")
        body = await request.body()
        if rest == "git-receive-pack" and hub.hold is not None:
            hub.held.set()
            await anyio.to_thread.run_sync(hub.hold.wait, 60)
        env = {
            "PATH": "/usr/bin:/bin",
            "GIT_PROJECT_ROOT": str(hub.root / "repos"),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": "x-access-token",
            "REQUEST_METHOD": request.method,
            "PATH_INFO": f"/{repo}.git/{rest}",
            "QUERY_STRING": request.url.query,
            "CONTENT_TYPE": request.headers.get("content-type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "GIT_PROTOCOL": request.headers.get("git-protocol", ""),
        }
        if request.headers.get("content-encoding"):
            env["HTTP_CONTENT_ENCODING"] = request.headers["content-encoding"]
        done = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                ["git", "http-backend"], input=body, env=env, capture_output=True, check=False
            )
        )
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        status, headers = 200, {}
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split(" ")[0])
            elif key:
                headers[key] = value.strip()
        hub.requests.append((request.method, f"/{repo}.git/{rest}"))
        return Response(payload, status, headers)

    return Starlette(
        routes=[
            Route("/app", get_app),
            Route("/app/installations/{installation_id:int}", get_installation),
            Route("/app/installations/{installation_id:int}/access_tokens", access_tokens, methods=["POST"]),
            Route("/repos/{owner}/{repo}/installation", get_repo_installation),
            Route("/repos/{owner}/{repo}", get_repo),
            Route("/repos/{owner}/{repo}/pulls", create_pull, methods=["POST"]),
            Route("/login/device/code", device_code, methods=["POST"]),
            Route("/login/oauth/access_token", oauth_token, methods=["POST"]),
            Route("/applications/{client_id}/token", revoke_user_token, methods=["DELETE"]),
            Route("/{path:path}", smart_http, methods=["GET", "POST"]),
        ]
    )


def _split_git_path(path: str) -> tuple[str, str, str]:
    parts = path.split("/")
    if len(parts) < 3 or not parts[1].endswith(".git"):
        return ("", "", "")
    return parts[0], parts[1].removesuffix(".git"), "/".join(parts[2:])


@contextlib.contextmanager
def github_standin(root: Path) -> Iterator[GitHub]:
    """The stand-in on a free loopback port over TLS; ``hub.url`` is its base URL (API and
    web alike), ``hub.ca_file`` the CA that signed its certificate."""
    root.mkdir(parents=True, exist_ok=True)
    ca, cert, key = write_test_ca(root)
    hub = GitHub(root, ca_file=ca)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    hub.url = f"https://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(
        build_app(hub), ssl_certfile=str(cert), ssl_keyfile=str(key), log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise AssertionError("the GitHub stand-in did not start")
            time.sleep(0.01)
        yield hub
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
