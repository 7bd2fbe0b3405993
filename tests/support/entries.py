"""Registry entries several tests build: a session and a rank of this node's files (``session``, ``rank``: the
live test process by default), and a multi-node job's entries as read from its store (``rank_entry``,
``node_entry``). Each is valid against ``registry.schema.json``."""

from __future__ import annotations

import os
import time

from rtdebug.common.procinfo import process_create_time


def session(sid="s1", pid=None, ports=(6000, 6001), host="127.0.0.1"):
    pid = pid or os.getpid()
    now = time.time()
    return {
        "schema_version": 1,
        "kind": "session",
        "session_id": sid,
        "mode": "torchrun",
        "launcher_pid": pid,
        "launcher_create_time": process_create_time(pid) or 1.0,
        "command": ["rtdebug"],
        "cwd": "/",
        "script": "t.py",
        "nnodes": "1",
        "nproc_per_node": 2,
        "node_rank": 0,
        "host": host,
        "port_base": ports[0],
        "ports": list(ports),
        "wait": "none",
        "started_at": now,
        "updated_at": now,
        "ended_at": None,
        "exit_code": None,
        "state": "running",
    }


def rank(sid="s1", r=0, pid=None, state="ready"):
    pid = pid or os.getpid()
    now = time.time()
    return {
        "schema_version": 1,
        "kind": "rank",
        "session_id": sid,
        "rank": r,
        "local_rank": r,
        "node_rank": 0,
        "world_size": 2,
        "host": "127.0.0.1",
        "port": 6000 + r,
        "pid": pid,
        "create_time": process_create_time(pid) or 1.0,
        "state": state,
        "lazy": True,
        "wait": False,
        "attach_count": 0,
        "script": "t.py",
        "cwd": "/",
        "started_at": now,
        "updated_at": now,
        "exit_code": None,
        "error": None,
    }


def rank_entry(rank: int, state: str = "ready", host: str = "127.0.0.1") -> dict:
    now = time.time()
    return {
        "schema_version": 1,
        "kind": "rank",
        "session_id": "job-abc123",
        "rank": rank,
        "local_rank": 0,
        "node_rank": rank,
        "world_size": 2,
        "host": host,
        "port": 5678 + rank,
        "pid": 4242 + rank,
        "create_time": now,
        "state": state,
        "lazy": True,
        "wait": False,
        "attach_count": 0,
        "script": "t.py",
        "cwd": "/w",
        "started_at": now,
        "updated_at": now,
        "exit_code": None,
        "error": None,
    }


def node_entry(group: int) -> dict:
    now = time.time()
    return {
        "schema_version": 1,
        "kind": "session",
        "session_id": f"node{group}-session",
        "mode": "torchrun",
        "launcher_pid": 100 + group,
        "launcher_create_time": now,
        "command": ["rtdebug"],
        "cwd": "/w",
        "script": "t.py",
        "nnodes": "2",
        "nproc_per_node": 1,
        "node_rank": None,
        "host": "127.0.0.1",
        "port_base": 5678,
        "ports": [5678, 5679],
        "started_at": now,
        "updated_at": now,
        "state": "running",
        "store": "x:1",
        "rdzv_id": "job",
    }
