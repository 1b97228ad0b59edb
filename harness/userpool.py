"""A user pool for real pilots: collector, negotiator and schedd, whose jobs wait until pilots join.

Owns: the configuration that turns a harness pool into an ordinary HTCondor pool users submit to
(a negotiator that matches every few seconds, the schedd asking for negotiation on submit, no
routes), the pool's token-signing key, and the one identity pilots may advertise startds as: the
collector accepts startd and master ads only from a peer that authenticated with a token the pool
issued (IDTOKENS), so a pilot joins only with the token it was given.  Standard library only.
"""

from __future__ import annotations

from pathlib import Path

from harness.pool import Pool

#: The identity of the pool's tokens for pilots.
PILOT_IDENTITY = "pilot@podgahp.test"

#: Configuration read after the CE-like base of harness.pool: an ordinary pool.
CONFIG = f"""\
## An ordinary pool for users' jobs, joined by pilots that authenticate with the pool's token.
DAEMON_LIST = $(DAEMON_LIST) NEGOTIATOR
JOB_ROUTER_ROUTE_NAMES =
JOB_ROUTER_ENTRIES =
SCHEDD_SEND_RESCHEDULE = True
NEGOTIATOR_INTERVAL = 5
NEGOTIATOR_MIN_INTERVAL = 1
NEGOTIATOR_CYCLE_DELAY = 1
## Not a CE: the security of an ordinary pool, in place of the CE-like base's (HTCondor-CE's).
## Local users and daemons authenticate with FS, pilots with the pool's tokens; every
## authenticated identity may write, and only the pilots' identity may advertise a startd.
UID_DOMAIN = $(FULL_HOSTNAME)
SEC_DEFAULT_AUTHENTICATION_METHODS = FS, IDTOKENS
SEC_CLIENT_AUTHENTICATION_METHODS = FS, IDTOKENS
SCHEDD.SEC_WRITE_AUTHENTICATION_METHODS =
SCHEDD.SEC_READ_AUTHENTICATION_METHODS =
COLLECTOR.SEC_READ_AUTHENTICATION_METHODS =
COLLECTOR.SEC_WRITE_AUTHENTICATION_METHODS =
COLLECTOR.SEC_ADVERTISE_STARTD_AUTHENTICATION_METHODS =
ALLOW_WRITE = *
ALLOW_DAEMON = *
ALLOW_NEGOTIATOR = *
ALLOW_ADMINISTRATOR = *
ALLOW_ADVERTISE_SCHEDD = *
SCHEDD_AUDIT_LOG =
SCHEDD_DEBUG =
ALLOW_ADVERTISE_STARTD = {PILOT_IDENTITY}
ALLOW_ADVERTISE_MASTER = {PILOT_IDENTITY}, condor@*, root@*
"""


#: What every pilot of the tests, the demo and the benchmarks is given in its environment (through
#: PODGAHP_PROVISION_PILOT_ENVIRONMENT): the simulated cluster runs pods in the host's network, and a
#: startd otherwise listens on, and advertises, the host's own address; here it stays on loopback.
LOOPBACK_PILOT_ENVIRONMENT = "_CONDOR_NETWORK_INTERFACE=127.0.0.1 _CONDOR_ENABLE_IPV6=False"


def collector_address(pool: Pool) -> str:
    """The pool's collector as a pilot names it (CONDOR_HOST): host:port."""
    sinful = pool.path(f"{pool.log_dir}/.collector_address").read_text().splitlines()[0].strip()
    return sinful.strip("<>").split("?", 1)[0]


def pilot_token(pool: Pool) -> str:
    """A token of :data:`PILOT_IDENTITY` signed by the pool's collector key (made on first use)."""
    Path(pool.path(f"{pool.local_dir}/passwords.d")).mkdir(mode=0o700, exist_ok=True)
    return pool.run(["condor_token_create", "-identity", PILOT_IDENTITY]).stdout.strip() + "\n"
