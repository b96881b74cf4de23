"""The command-line back-end: ``squeue``, ``sinfo``, ``scontrol``, ``sbatch``, ``scancel``, run
here or on a front-end over SSH (see :mod:`~coorm_bridge.adapters.batch.runner`).

Snapshots read the text forms of squeue and sinfo (:mod:`.parse_text`), once per controller
whatever the number of partitions configured on it; the hardware still comes from ``sinfo
--json`` (asked once).

Only command building (:mod:`~coorm_bridge.adapters.slurm.commands`) and parsing
(:mod:`~coorm_bridge.adapters.slurm.parse`) are Slurm-specific; this module strings them together
and classifies failures. Every command runs with ``TZ=UTC`` so that the times scontrol prints and
reads are unambiguous whatever the controller's zone.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Hashable, Iterator, Sequence

from coorm_bridge.adapters.batch.backend import Backend, BatchFailure, Hardware, Read, ReadFailure
from coorm_bridge.adapters.batch.runner import Completed, Runner
from coorm_bridge.adapters.slurm import answers, commands, parse, parse_text, rights, rules_read
from coorm_bridge.adapters.slurm.binding import SlurmBinding
from coorm_bridge.adapters.slurm.hardware import check_errors, hardware_of, misaddressed
from coorm_bridge.adapters.slurm.rules import SlurmRules
from coorm_bridge.core.batch import AdapterError, JobSpec, JobState, Reservation, ReservationSpec


@contextlib.contextmanager
def _unreadable() -> Iterator[None]:
    """An answer the rules' parsers could not read: a failed read (the last rules are kept)."""
    try:
        yield
    except ValueError as error:
        raise BatchFailure("other", f"Slurm's rules: unreadable answer: {error}") from error


class SlurmCliBackend(Backend[SlurmBinding]):
    def __init__(self, runner: Runner, timeout: float = 30) -> None:
        self.runner = runner
        self.timeout = timeout

    def _run(self, binding: SlurmBinding, argv: Sequence[str], *, utc: bool = True) -> Completed:
        env = {**binding.env, **commands.ENV} if utc else binding.env
        done = self.runner.run(argv, env=env, timeout=self.timeout)
        if not done.ok:
            message = (done.stderr or done.stdout).strip() or f"{argv[0]} exit {done.returncode}"
            kind = answers.classify_error(message)
            raise BatchFailure(kind, answers.not_answering(message))
        return done

    @staticmethod
    def _target(binding: SlurmBinding) -> commands.Target:
        return commands.Target(cluster=binding.cluster, partition=binding.partition)

    def hardware(self, binding: SlurmBinding) -> Hardware:
        """``sinfo --json``, the first command to a cluster: a failure that shows a setting
        wrong (a ``-M`` cluster slurmdbd does not know, a slurm.conf Slurm cannot process) is
        said to be that setting's."""
        try:
            done = self._run(binding, commands.sinfo_json(self._target(binding)))
        except BatchFailure as failure:
            wrong = misaddressed(failure, binding, lambda: self._known_clusters(binding))
            if wrong is None:
                raise
            raise wrong from failure
        try:
            document = json.loads(done.stdout)
            check_errors(document, "sinfo --json")
            return hardware_of(document["nodes"], binding.partition, binding.cluster)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise BatchFailure("other", f"sinfo --json: unreadable answer: {error}") from error

    def _known_clusters(self, binding: SlurmBinding) -> list[str] | None:
        """The Slurm clusters slurmdbd knows, for a message (None when it cannot be asked)."""
        try:
            done = self._run(binding, commands.known_clusters())
        except (BatchFailure, AdapterError):
            return None
        return sorted({line.strip() for line in done.stdout.splitlines() if line.strip()})

    def source(self, binding: SlurmBinding) -> Hashable:
        """One controller: the same environment (SLURM_CONF) and the same ``-M`` cluster."""
        return (tuple(sorted(binding.env.items())), binding.cluster)

    def read(self, binding: SlurmBinding, now: int) -> Read:
        result = self.read_all([binding], now)[binding.name]
        if not isinstance(result, tuple):
            raise result
        return result

    def read_all(self, bindings: Sequence[SlurmBinding], now: int) -> dict[str, Read | ReadFailure]:
        """One squeue, one sinfo and one scontrol per controller, in text (see
        :mod:`.parse_text`: 20 times cheaper than --json at 10,000 jobs), shared by all the
        partitions configured on it; a controller that fails fails only its own clusters."""
        controllers: dict[Hashable, list[SlurmBinding]] = {}
        for binding in bindings:
            controllers.setdefault(self.source(binding), []).append(binding)
        results: dict[str, Read | ReadFailure] = {}
        for group in controllers.values():
            try:
                answers = self._read_controller(group[0], now)
            except (BatchFailure, ValueError, AdapterError) as failure:
                results.update(dict.fromkeys((b.name for b in group), failure))
                continue
            for binding in group:
                try:
                    results[binding.name] = self._cluster_of(binding, *answers)
                except ValueError as failure:
                    results[binding.name] = failure
        return results

    def _read_controller(
        self, binding: SlurmBinding, now: int
    ) -> tuple[list[parse_text.Line], list[parse_text.Line], str]:
        """The controller ``binding`` is on, whole: its nodes, its jobs and its reservations."""
        target = commands.Target(cluster=binding.cluster)
        nodes = parse_text.parse_sinfo_text(self._run(binding, commands.sinfo_text(target)).stdout)
        jobs = parse_text.parse_squeue_text(
            self._run(binding, commands.squeue_text(target)).stdout, now=now
        )
        reservations = self._run(binding, commands.show_reservations(target)).stdout
        return nodes, jobs, reservations

    @staticmethod
    def _cluster_of(
        binding: SlurmBinding,
        nodes: list[parse_text.Line],
        jobs: list[parse_text.Line],
        reservations: str,
    ) -> Read:
        """One cluster's share of its controller's answers: its partition's, or everything."""
        mine = parse_text.nodes_in(nodes, binding.partition)
        names = {node.name for node in mine}
        return (
            mine,
            parse_text.jobs_in(jobs, binding.partition),
            parse.parse_reservations(reservations, binding.partition, nodes=names),
        )

    def reservation(self, binding: SlurmBinding, name: str) -> Reservation | None:
        text = self._run(binding, commands.show_reservations(self._target(binding))).stdout
        found = [r for r in parse.parse_reservations(text, None) if r.name == name]
        return found[0] if found else None

    def create_reservation(self, binding: SlurmBinding, spec: ReservationSpec) -> None:
        argv = commands.create_reservation(self._target(binding), spec)
        self._write(binding, argv, spec.users)

    def update_reservation(
        self, binding: SlurmBinding, spec: ReservationSpec, *, begun: bool = False
    ) -> None:
        argv = commands.update_reservation(self._target(binding), spec, begun=begun)
        self._write(binding, argv, spec.users)

    def delete_reservation(self, binding: SlurmBinding, name: str) -> None:
        self._write(binding, commands.delete_reservation(self._target(binding), name), ())

    # -- users' rules ---------------------------------------------------------------------------

    def rules(self, binding: SlurmBinding) -> SlurmRules:
        """The partition's rules, and the accounting's where it is enforced (see
        :mod:`.rules_read`: two scontrol commands, and three sacctmgr ones only then)."""
        target = self._target(binding)
        config = self._run(binding, rules_read.show_config(target), utc=False).stdout
        partitions = self._run(binding, rules_read.show_partitions(target)).stdout
        with _unreadable():
            cluster, enforce = rules_read.enforce_of(config)
            cluster = binding.cluster or cluster
            rules = SlurmRules(
                cluster=cluster,
                partition=rules_read.parse_partition(partitions, binding.partition),
                enforce=enforce,
            )
        if not rules.associations_enforced:
            return rules
        users = self._run(binding, rules_read.show_users()).stdout
        associations = self._run(binding, rules_read.show_associations(cluster)).stdout
        qos = self._run(binding, rules_read.show_qos()).stdout
        with _unreadable():
            return SlurmRules(
                cluster=cluster,
                partition=rules.partition,
                enforce=enforce,
                default_accounts=rules_read.parse_users(users),
                associations=rules_read.parse_associations(associations),
                qos=rules_read.parse_qos(qos),
            )

    # -- rights -------------------------------------------------------------------------------

    def check_rights(self, binding: SlurmBinding) -> None:
        """The probe of :mod:`.rights`: "Invalid time specified" means this account got past
        the rights check; "Invalid user id" that it may not create reservations."""
        target = self._target(binding)
        try:
            self._run(binding, rights.probe(target))
        except BatchFailure as failure:
            if failure.kind == "invalid_time":
                return
            if failure.kind == "invalid_user":
                raise BatchFailure("no_rights", self._lacking(binding, str(failure))) from failure
            raise
        # Never seen (it starts in 2000): made all the same, it is ours to delete.
        self._run(binding, commands.delete_reservation(target, rights.PROBE_NAME))

    def _write(self, binding: SlurmBinding, argv: Sequence[str], users: Sequence[str]) -> None:
        """A reservation command; its "Invalid user id" blamed on this account or on ``users``
        (Slurm 22.05 says the same for both: the probe tells which)."""
        try:
            self._run(binding, argv)
        except BatchFailure as failure:
            if failure.kind != "invalid_user":
                raise
            self.check_rights(binding)  # raises no_rights, or that the probe got no answer
            named = ", ".join(users) or "none"
            raise BatchFailure(
                "invalid_user",
                f"{failure} (Slurm knows no such user among those allowed: {named}; the "
                "bridge's own account may create reservations)",
            ) from failure

    def _lacking(self, binding: SlurmBinding, said: str) -> str:
        """The remedy for an admin, with the account's and Slurm's names when they can be had
        (asked only then: this account lacking rights is rare)."""
        account: str | None = None
        config: dict[str, str] = {}
        try:  # where the commands run: here, or on the SSH front-end
            done = self.runner.run(("id", "-un"), env=binding.env, timeout=self.timeout)
            if done.ok:
                account = done.stdout.strip() or None
        except AdapterError:
            pass  # the remedy is still worth giving without it
        try:
            shown = self._run(binding, rights.show_config(self._target(binding)), utc=False)
            config = rights.config_values(shown.stdout)
        except (AdapterError, BatchFailure):
            pass
        return rights.lacking(said, account, config)

    def submit(self, binding: SlurmBinding, job: JobSpec) -> str:
        # Not in UTC: sbatch hands its environment to the job, which should keep the site's zone.
        done = self._run(binding, commands.sbatch(self._target(binding), job), utc=False)
        # --parsable prints "ID" or "ID;cluster".
        return answers.parse_job_id(done.stdout)

    def cancel(self, binding: SlurmBinding, job_id: str) -> None:
        self._run(binding, commands.scancel(self._target(binding), job_id))

    def job_state(self, binding: SlurmBinding, job_id: str) -> JobState:
        try:
            done = self._run(binding, commands.job_state(self._target(binding), job_id))
        except BatchFailure as failure:
            if failure.kind == "no_such_job":  # long finished: Slurm has forgotten it
                return JobState.UNKNOWN
            raise
        return parse.job_state_of(done.stdout.strip())

    def close(self) -> None:
        self.runner.close()
