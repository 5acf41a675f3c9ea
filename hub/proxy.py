"""configurable-http-proxy for the hub, in a process of its own, so the hub can restart while
learners work: their browsers talk to their servers through this proxy, which keeps its routes
while the hub is away (hub/jupyterhub_config.py: ConfigurableHTTPProxy.should_start = False,
cleanup_servers = False).

    python3 hub/proxy.py        as root, with the hub's TINYGPT_* variables (systemd: tinygpt-proxy.service)

It reads the same settings as the hub: TINYGPT_HUB_BIND_URL (where learners connect) [http://:8000],
TINYGPT_PROXY_API_URL [http://127.0.0.1:8001], TINYGPT_HUB_API_URL [http://127.0.0.1:8081] (its
error pages), TINYGPT_HUB_STATE [/srv/jupyterhub], TINYGPT_CHP (the command)
[configurable-http-proxy], and TINYGPT_PROXY_USER, the user it drops to after reading its token
[nobody; root to bind a port below 1024]. The hub and the proxy share one API token, kept in
<state>/proxy_auth_token (0600, root's): whichever starts first makes it. The proxy's pid goes to
<state>/jupyterhub-proxy.pid.
"""
import os
import pwd
import secrets
import shutil
import sys
import urllib.parse

TOKEN_FILE = "proxy_auth_token"
PID_FILE = "jupyterhub-proxy.pid"


def auth_token(state):
    """The proxy's API token, shared by the hub and the proxy: made once (0600), then read."""
    os.makedirs(state, mode=0o711, exist_ok=True)
    path = os.path.join(state, TOKEN_FILE)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        os.chmod(path, 0o600)
        with open(path) as f:
            token = f.read().strip()
        if token:
            return token
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)       # an empty file (a crash while writing)
    token = secrets.token_hex(32)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def _host_port(url, default_port):
    u = urllib.parse.urlparse(url)
    return u.hostname or "", u.port or default_port


def command(env=os.environ):
    """configurable-http-proxy's command line for these settings."""
    ip, port = _host_port(env.get("TINYGPT_HUB_BIND_URL", "http://:8000"), 8000)
    api_ip, api_port = _host_port(env.get("TINYGPT_PROXY_API_URL", "http://127.0.0.1:8001"), 8001)
    hub = env.get("TINYGPT_HUB_API_URL", "http://127.0.0.1:8081").rstrip("/")
    chp = env.get("TINYGPT_CHP") or shutil.which("configurable-http-proxy") or "configurable-http-proxy"
    return [chp, "--ip", ip, "--port", str(port), "--api-ip", api_ip, "--api-port", str(api_port),
            "--error-target", f"{hub}/hub/error"]


def main():
    state = os.environ.get("TINYGPT_HUB_STATE", "/srv/jupyterhub")
    env = dict(os.environ, CONFIGPROXY_AUTH_TOKEN=auth_token(state))
    cmd = command(env)
    with open(os.path.join(state, PID_FILE), "w") as f:       # exec keeps this pid
        f.write(f"{os.getpid()}\n")
    user = os.environ.get("TINYGPT_PROXY_USER", "nobody")
    if os.geteuid() == 0 and user and user != "root":
        pw = pwd.getpwnam(user)
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)
        env["HOME"] = "/"
    print(f"[tinygpt proxy] {' '.join(cmd)} (as {user or 'root'})", file=sys.stderr, flush=True)
    os.execvpe(cmd[0], cmd, env)


if __name__ == "__main__":
    main()
