"""The host registry's model: what pwe knows about each compute resource."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, field_validator,
                      model_validator)

Scalar = Union[StrictBool, StrictInt, StrictFloat, StrictStr]


def _one_line(v):
    # host values end up in job script directives: a line break would add a script line
    if isinstance(v, str) and any(c in v for c in "\n\r\x00"):
        raise ValueError("must be one line (no line breaks)")
    return v


class Partition(BaseModel):
    """A partition (SLURM) or queue (PBS, LoadLeveler), in the host's priority order."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: StrictStr
    max_walltime: Annotated[Union[StrictInt, StrictFloat], Field(gt=0)] | None = Field(None, description="minutes")
    max_nodes: Annotated[StrictInt, Field(ge=1)] | None = None
    cores_per_node: Annotated[StrictInt, Field(ge=1)] | None = None

    _line = field_validator("name")(classmethod(lambda cls, v: _one_line(v)))


class Host(BaseModel):
    """One compute resource and how to reach it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: StrictStr = ""
    protocol: StrictStr = Field("local", description="one of protocols.registry.NAMES")
    contact: StrictStr = Field("local", description="'local' (this machine) or ssh://user@login-node[:port]")
    cores_per_node: Annotated[StrictInt, Field(ge=1)] | None = Field(None, description="default: this machine's")
    gpus_per_node: Annotated[StrictInt, Field(ge=0)] = 0
    memory_per_node: Annotated[StrictInt, Field(ge=1)] | None = Field(
        None, description="MB of memory per node members may use; when given, members are packed by memoryPerMember")
    shared_nodes: StrictBool = True
    max_nodes: Annotated[StrictInt, Field(ge=1)] | None = Field(None, description="most nodes one pilot job asks for")
    max_pilots: Annotated[StrictInt, Field(ge=1)] = Field(1, description="most pilot jobs at once on this host")
    nodes: list[StrictStr] = Field(default_factory=list, description="explicit nodes the pilot fans out to over ssh")
    partitions: list[Partition] = Field(default_factory=list)
    account: StrictStr | None = None
    setup: list[StrictStr] = Field(default_factory=list, description="lines run before the pilot starts")
    scratch: StrictStr | None = None
    env: dict[StrictStr, Scalar] = Field(default_factory=dict)
    launcher: Literal["auto", "fork", "srun", "ssh", "mpiexec"] = "auto"
    launcher_prefix: StrictStr | None = None
    ssh_config: StrictStr | None = Field(None, description="ssh client config file for contact and nodes")
    identity_file: StrictStr | None = Field(None, description="ssh key for the contact (else ssh-agent, ssh_config)")
    known_hosts: StrictStr | None = Field(None, description="known_hosts file checked besides ~/.ssh/known_hosts")
    accept_new_host_keys: StrictBool = Field(False, description="trust an unknown host key on first use (not advised)")
    connect_timeout: Annotated[Union[StrictInt, StrictFloat], Field(gt=0)] = 10
    shared_fs: StrictBool = Field(True, description="the host sees this machine's run directories at the same paths")
    properties: dict[StrictStr, Scalar] = Field(default_factory=dict)

    _lines = field_validator("contact", "account", "scratch", "ssh_config", "identity_file", "known_hosts",
                             "launcher_prefix")(classmethod(lambda cls, v: _one_line(v)))

    @field_validator("protocol")
    @classmethod
    def _protocol(cls, v: str) -> str:
        from protocols.registry import UnknownProtocol, info

        try:
            info(v)  # the one list of protocols; an unknown name is one line with the known ones
        except UnknownProtocol as exc:  # pydantic takes a ValueError; hostinfo.registry adds file and line
            raise ValueError(exc.message) from None
        return v

    @model_validator(mode="after")
    def _contact(self) -> "Host":
        if self.contact != "local" and not self.contact.startswith("ssh://"):
            raise ValueError(f"contact {self.contact!r}: write 'local' or ssh://user@host")
        if self.contact != "local":
            from protocols.ssh import split_contact

            try:
                split_contact(self.contact)  # as the SSH runner reads it, so a run never meets a bad one
            except ValueError as exc:
                raise ValueError(f"contact {self.contact!r}: {exc}") from None
        from protocols.registry import PROTOCOLS

        if self.contact != "local" and not PROTOCOLS[self.protocol].remote:
            remote = ", ".join(n for n, p in PROTOCOLS.items() if p.remote)
            raise ValueError(f"protocol {self.protocol} runs on this machine (contact local); for a remote head node "
                             f"use a protocol that submits there: {remote}")
        return self


class HostsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hosts: dict[StrictStr, Host] = Field(default_factory=dict)
