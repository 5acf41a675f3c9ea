"""jupyterhub-idle-culler as the hub runs it (a service of its own, hub/jupyterhub_config.py), so
that it stops when the hub stops it.

    python hub/idle_culler.py --timeout=3600 --cull-every=300     # the culler's own options

The hub stops a service it started with SIGINT, then waits (Spawner.interrupt_timeout: 30 s in
JupyterHub 6) before it sends SIGTERM, and while it waits it is down: nobody can log in. A hub
started with SIGINT ignored (a shell script's background job `jupyterhub ... &`, some supervisors,
nohup in a script) starts its services with SIGINT still ignored: it installs its own handler only
after they run, and an ignored signal stays ignored across exec. The culler then sat out those
30 s at every hub restart. So, before the culler starts: SIGINT raises KeyboardInterrupt again
(the culler's loop ends on it and the process exits at once) and SIGTERM ends the process, whatever
the hub inherited. tests/test_hub_config.py stops it as the hub does.
"""
import signal

signal.signal(signal.SIGINT, signal.default_int_handler)
signal.signal(signal.SIGTERM, signal.SIG_DFL)

from jupyterhub_idle_culler import main  # noqa: E402  (after the signals: nothing may run before)

if __name__ == "__main__":
    main()
