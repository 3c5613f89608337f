"""What the agents did, for a person at a terminal: `sessions`, `events`, `memory`, `outcomes`, `approvals`.

Each view reads the state database the way the approval commands do (stores only: no MCP SDK, no catalogue), so it
answers at once and is safe beside running servers. Every view has `--json` for machines; on a terminal its rows
are cut to the window and longer text goes through the pager.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
from collections.abc import Sequence
from typing import Any

import anyio
from pydantic.alias_generators import to_camel

from managed_tools.server.cli.terminal import Column, Screen, more, short_ids, table
from managed_tools.server.config.state_place import StatePlace
from managed_tools.server.consent.human import ID_STARTS, HumanError, age, like_prefix, state_database
from managed_tools.stores import events, memory, outcomes
from managed_tools.stores.db import Database, Row, Tx, as_dict

FOLLOW_POLL_SECONDS = 0.5


def run(args: argparse.Namespace) -> int:
    if args.command == "memory":
        args.target = _target(args)
    views = {
        "sessions": _sessions,
        "events": _events,
        "memory": _memory,
        "outcomes": _outcomes,
        "approvals": _approvals,
    }
    with contextlib.suppress(KeyboardInterrupt):  # how --follow ends
        anyio.run(views[args.command], StatePlace.of(args), args, Screen.now())
    return 0


def _target(args: argparse.Namespace) -> str | None:
    """`memory` alone lists the documents; `memory show TARGET` is one of them (--versions, --diff need it)."""
    words = args.words
    if len(words) == 2 and words[0] == "show":
        return str(words[1])
    if words:
        raise HumanError(f"memory takes `show TARGET`, `export`, `import FILE` or nothing; not {' '.join(words)!r}.")
    if args.versions or args.diff:
        raise HumanError("--versions and --diff need a document: managed-tools memory show TARGET --versions")
    return None


def _json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def wire(row: dict[str, Any], id_name: str | None = None) -> dict[str, Any]:
    """A row under the key names MCP results use (camelCase; its `id` named for what it is: `sessionId`, ...)."""
    return {(id_name if key == "id" and id_name else to_camel(key)): value for key, value in row.items()}


def _show(screen: Screen, lines: Sequence[str | None]) -> None:
    screen.show("\n".join(line for line in lines if line is not None))


async def one_session(tx: Tx, given: str) -> str:
    """A session's full id from its id or a unique prefix of it (as the tables print them)."""
    rows = await tx.fetchall(f"SELECT id FROM sessions WHERE {ID_STARTS} ORDER BY id LIMIT 6", (like_prefix(given),))
    found = _named(rows, given)
    if found is not None:
        return str(found["id"])
    if not rows:
        raise HumanError(f"No session {given!r}; `managed-tools sessions` lists them.")
    ids = ", ".join(row["id"] for row in rows[:5])
    raise HumanError(f"{given!r} is the start of more than one session ({ids}); give more of its id.")


def _named(rows: Sequence[Row], given: str) -> Row | None:
    """The row `given` names among those whose id starts with it: its exact id, else the only one."""
    exact = [row for row in rows if row["id"] == given]
    return exact[0] if exact else rows[0] if len(rows) == 1 else None


# sessions ------------------------------------------------------------------------------------------------------


async def _sessions(place: StatePlace, args: argparse.Namespace, screen: Screen) -> None:
    where, params = ("WHERE agent_id = ?", [args.agent]) if args.agent else ("", [])
    async with state_database(place) as db, db.read() as tx:
        total = int(await tx.scalar(f"SELECT COUNT(*) FROM sessions {where}", params))
        rows = [
            as_dict(row)
            for row in await tx.fetchall(
                "SELECT s.id, s.agent_id, s.owner, s.parent_id, s.title, s.status, s.created_at, s.last_activity_at, "
                "(SELECT COUNT(*) FROM events e WHERE e.session_id = s.id) AS events, "
                "(SELECT e.summary FROM events e WHERE e.session_id = s.id AND e.summary IS NOT NULL "
                "ORDER BY e.seq DESC LIMIT 1) AS latest "
                f"FROM sessions s {where} ORDER BY s.last_activity_at DESC, s.id DESC LIMIT ?",
                [*params, args.limit],
            )
        ]
        graded = await outcomes.latest_evaluations(tx, [row["id"] for row in rows])
    for row in rows:
        row["grade"] = graded[row["id"]].grade_status if row["id"] in graded else None
    if args.json:
        _json({"total": total, "sessions": [wire(row, "sessionId") for row in rows]})
        return
    if not rows:
        print("No sessions yet: a client that connects to `managed-tools serve` starts one.")
        return
    short = short_ids([row["id"] for row in rows])
    columns = [Column(h) for h in ("SESSION", "AGENT", "STATUS", "ACTIVE", "EVENTS", "GRADE")]
    cells = [
        [
            short[row["id"]],
            row["agent_id"],
            _status(screen, row["status"]),
            age(row["last_activity_at"]),
            str(row["events"]),
            row["grade"] or "-",
            row["title"] or row["latest"] or "",
        ]
        for row in rows
    ]
    _show(screen, [table(screen, [*columns, Column("LATEST", flexible=True)], cells), more(len(rows), total)])


def _status(screen: Screen, status: str) -> str:
    colours = {"running": "green", "requires_action": "yellow", "terminated": "dim"}
    return screen.style(status, colours[status]) if status in colours else status


# events --------------------------------------------------------------------------------------------------------

_EVENT_COLUMNS = "seq, id, session_id, wake_id, type, created_at, summary, payload"


async def _events(place: StatePlace, args: argparse.Namespace, screen: Screen) -> None:
    async with state_database(place) as db:
        async with db.read() as tx:
            session = await one_session(tx, args.session) if args.session else None
            where, params = _event_filter(session, args.type)
            total = int(await tx.scalar(f"SELECT COUNT(*) FROM events {where}", params))
            rows = await tx.fetchall(
                f"SELECT * FROM (SELECT {_EVENT_COLUMNS} FROM events {where} ORDER BY seq DESC LIMIT ?) AS last "
                "ORDER BY seq",
                [*params, args.limit],
            )
        shown = [_event(row) for row in rows]
        if args.json and not args.follow:
            _json({"total": total, "events": [wire(e, "eventId") for e in shown]})
            return
        if not args.follow:
            if not shown:
                print("No events match." if total == 0 and (session or args.type) else "No events yet.")
                return
            _show(screen, [_event_table(screen, shown), more(len(shown), total)])
            return
        await _follow(db, args, screen, shown, session)


def _event_filter(session: str | None, types: list[str] | None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    if session is not None:
        clauses.append("session_id = ?")
        params.append(session)
    if types:
        clauses.append(f"type IN ({', '.join('?' * len(types))})")
        params.extend(types)
    return ("WHERE " + " AND ".join(clauses) if clauses else ""), params


def _event(row: Any) -> dict[str, Any]:
    event = as_dict(row)
    event["payload"] = json.loads(event["payload"])
    return event


def _event_table(screen: Screen, shown: Sequence[dict[str, Any]], *, heading: bool = True) -> str:
    columns = [Column("SEQ"), Column("TIME"), Column("SESSION"), Column("TYPE"), Column("SUMMARY", flexible=True)]
    short = short_ids([e["session_id"] for e in shown])
    cells = [
        [str(e["seq"]), e["created_at"][5:19].replace("T", " "), short[e["session_id"]], e["type"], _said(screen, e)]
        for e in shown
    ]
    text = table(screen, columns, cells)
    return text if heading else text.split("\n", 1)[1] if "\n" in text else ""


def _said(screen: Screen, event: dict[str, Any]) -> str:
    """An event in a line: a call's start with the command it runs; a command's end with its exit status (a
    non-zero exit in red, as a failure), then the command."""
    payload = event["payload"] if isinstance(event["payload"], dict) else {}
    if event["type"] == "span.started" and "toolName" in payload:
        command = events.command_line(payload.get("args"))
        return f"{payload['toolName']} started" + (f": {command}" if command is not None else "")
    said = str(event["summary"] or "")
    if isinstance(payload.get("exitCode"), int) and payload["exitCode"]:
        said = screen.style(said, "red")
    return said + (f": {payload['command']}" if isinstance(payload.get("command"), str) else "")


async def _follow(
    db: Database, args: argparse.Namespace, screen: Screen, shown: list[dict[str, Any]], session: str | None
) -> None:
    """Print the last events, then each new one as it is appended, until interrupted (Ctrl-C ends it quietly)."""
    where, params = _event_filter(session, args.type)
    where = f"{where} AND seq > ?" if where else "WHERE seq > ?"
    last = shown[-1]["seq"] if shown else 0
    first = True
    while True:
        if shown:
            if args.json:
                for event in shown:
                    print(json.dumps(wire(event, "eventId"), ensure_ascii=False), flush=True)
            else:
                print(_event_table(screen, shown, heading=first), flush=True)
                first = False
            last = shown[-1]["seq"]
        await anyio.sleep(FOLLOW_POLL_SECONDS)
        async with db.read() as tx:
            rows = await tx.fetchall(
                f"SELECT {_EVENT_COLUMNS} FROM events {where} ORDER BY seq LIMIT 500", [*params, last]
            )
        shown = [_event(row) for row in rows]


# memory --------------------------------------------------------------------------------------------------------


async def _memory(place: StatePlace, args: argparse.Namespace, screen: Screen) -> None:
    async with state_database(place) as db, db.read() as tx:
        session = await one_session(tx, args.session) if args.session else None
        if args.target is None:
            await _documents(tx, args, screen, session)
            return
        scope = await _scope(tx, args.target, session, args.agent)
        if args.diff:
            await _diff(tx, scope, args, screen)
        elif args.versions:
            await _versions(tx, scope, args.target, args, screen)
        else:
            row = await tx.fetchone(
                "SELECT content, version_id, updated_at FROM memory_documents WHERE scope = ? AND target = ?",
                (scope, args.target),
            )
            assert row is not None  # _scope found it
            if args.json:
                _json({"scope": scope, "target": args.target, **wire(as_dict(row))})
            else:
                heading = f"{args.target} in {scope}, version {row['version_id']}, {age(row['updated_at'])} ago"
                _show(screen, [screen.style(heading, "dim"), row["content"]])


async def _documents(tx: Tx, args: argparse.Namespace, screen: Screen, session: str | None) -> None:
    clauses, params = [], []
    if session is not None:
        clauses.append("d.scope = ?")
        params.append(session)
    if args.agent:
        clauses.append("d.agent_id = ?")
        params.append(args.agent)
    where = "WHERE " + " AND ".join(clauses) if clauses else ""
    total = int(await tx.scalar(f"SELECT COUNT(*) FROM memory_documents d {where}", params))
    rows = [
        as_dict(row)
        for row in await tx.fetchall(
            "SELECT d.scope, d.target, d.agent_id, d.version_id, d.updated_at, LENGTH(d.content) AS chars, "
            "(SELECT COUNT(*) FROM memory_versions v WHERE v.scope = d.scope AND v.target = d.target) AS versions, "
            "SUBSTR(d.content, 1, 200) AS preview "
            f"FROM memory_documents d {where} ORDER BY d.updated_at DESC LIMIT ?",
            [*params, args.limit],
        )
    ]
    if args.json:
        _json({"total": total, "documents": [wire(r) for r in rows]})
        return
    if not rows:
        print("No memory written yet.")
        return
    short = short_ids([r["scope"] for r in rows])
    columns = [Column(h) for h in ("TARGET", "SCOPE", "VERSIONS", "CHARS", "UPDATED")]
    cells = [
        [r["target"], short[r["scope"]], str(r["versions"]), str(r["chars"]), age(r["updated_at"]), r["preview"]]
        for r in rows
    ]
    _show(screen, [table(screen, [*columns, Column("BEGINS", flexible=True)], cells), more(len(rows), total)])


async def _scope(tx: Tx, target: str, session: str | None, agent: str | None) -> str:
    """The one scope holding `target` among those the flags allow."""
    sql, params = "SELECT scope FROM memory_documents WHERE target = ?", [target]
    if session is not None:
        sql, params = sql + " AND scope = ?", [*params, session]
    if agent:
        sql, params = sql + " AND agent_id = ?", [*params, agent]
    scopes = [row["scope"] for row in await tx.fetchall(sql + " ORDER BY updated_at DESC LIMIT 6", params)]
    if not scopes:
        raise HumanError(f"No memory {target!r} here; `managed-tools memory` lists what there is.")
    if len(scopes) > 1:
        raise HumanError(
            f"{target!r} is in {len(scopes)}{'+' if len(scopes) == 6 else ''} scopes "
            f"({', '.join(scopes[:5])}); choose one with --session ID or --agent NAME."
        )
    return str(scopes[0])


async def _versions(tx: Tx, scope: str, target: str, args: argparse.Namespace, screen: Screen) -> None:
    total = int(await tx.scalar("SELECT COUNT(*) FROM memory_versions WHERE scope = ? AND target = ?", (scope, target)))
    rows = [
        as_dict(row)
        for row in await tx.fetchall(
            "SELECT id, created_at, source, mode, size_bytes, session_id, preview FROM memory_versions "
            "WHERE scope = ? AND target = ? ORDER BY seq DESC LIMIT ?",
            (scope, target, args.limit),
        )
    ]
    if args.json:
        _json({"scope": scope, "target": target, "total": total, "versions": [wire(r, "versionId") for r in rows]})
        return
    short = short_ids([r["id"] for r in rows])
    columns = [Column(h) for h in ("VERSION", "WRITTEN", "SOURCE", "MODE", "BYTES")]
    cells = [
        [
            short[r["id"]],
            r["created_at"][:19].replace("T", " "),
            r["source"],
            r["mode"],
            str(r["size_bytes"]),
            r["preview"],
        ]
        for r in rows
    ]
    _show(screen, [table(screen, [*columns, Column("BEGINS", flexible=True)], cells), more(len(rows), total)])


async def _diff(tx: Tx, scope: str, args: argparse.Namespace, screen: Screen) -> None:
    target = args.target
    (old_id, old), (new_id, new) = [await _version_text(tx, scope, target, given) for given in args.diff]
    lines = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), f"{target}@{old_id}", f"{target}@{new_id}", lineterm=""
        )
    )
    if args.json:
        _json({"scope": scope, "target": target, "from": old_id, "to": new_id, "diff": "\n".join(lines)})
        return
    if not lines:
        print(f"{old_id} and {new_id} hold the same text.")
        return
    colours = {"+": "green", "-": "red", "@": "cyan"}
    _show(screen, [screen.style(line, colours[line[0]]) if line[:1] in colours else line for line in lines])


async def _version_text(tx: Tx, scope: str, target: str, given: str) -> tuple[str, str]:
    rows = await tx.fetchall(
        f"SELECT id FROM memory_versions WHERE scope = ? AND target = ? AND {ID_STARTS} ORDER BY id LIMIT 3",
        (scope, target, like_prefix(given)),
    )
    found = _named(rows, given)
    if found is not None:
        return str(found["id"]), await memory.content_of(tx, str(found["id"]))
    what = "no version" if not rows else "more than one version"
    raise HumanError(f"{given!r} names {what} of {target}; `managed-tools memory show {target} --versions` lists them.")


# outcomes ------------------------------------------------------------------------------------------------------


async def _outcomes(place: StatePlace, args: argparse.Namespace, screen: Screen) -> None:
    async with state_database(place) as db, db.read() as tx:
        if args.session:
            session = await one_session(tx, args.session)
            history = await outcomes.history(tx, session, args.limit)
            active = await outcomes.active(tx, session)
            if args.json:
                _json(
                    {
                        "sessionId": session,
                        "outcome": wire(active.model_dump()) if active else None,
                        "evaluations": [wire(e.model_dump()) for e in history],
                    }
                )
                return
            if active is None:
                print(f"Session {session} has no outcome defined.")
                return
            lines = [screen.style(f"{active.title}: {len(active.success_criteria)} criteria", "bold")]
            lines += [f"  - {criterion}" for criterion in active.success_criteria]
            lines += [
                f"{e.evaluated_at[:19].replace('T', ' ')}  #{e.iteration}  {_grade(screen, e.grade_status)}"
                for e in history
            ]
            _show(screen, [*lines, _trend(history)])
            return
        ids = [
            row["session_id"]
            for row in await tx.fetchall(
                "SELECT session_id FROM outcomes GROUP BY session_id ORDER BY MAX(defined_at) DESC LIMIT ?",
                (args.limit,),
            )
        ]
        active_many = await outcomes.active_many(tx, ids)
        graded = await outcomes.latest_evaluations(tx, ids)
    found = [
        {
            "sessionId": sid,
            "title": active_many[sid].title,
            "criteria": len(active_many[sid].success_criteria),
            "grade": graded[sid].grade_status if sid in graded else None,
            "iteration": graded[sid].iteration if sid in graded else 0,
            "evaluatedAt": graded[sid].evaluated_at if sid in graded else None,
        }
        for sid in ids
        if sid in active_many
    ]
    if args.json:
        _json({"outcomes": found})
        return
    if not found:
        print("No outcomes defined yet (outcome_define sets one).")
        return
    short = short_ids([f["sessionId"] for f in found])
    columns = [Column(h) for h in ("SESSION", "GRADE", "EVALUATIONS", "EVALUATED", "CRITERIA")]
    cells = [
        [
            short[f["sessionId"]],
            _grade(screen, f["grade"] or "-"),
            str(f["iteration"]),
            age(f["evaluatedAt"]) if f["evaluatedAt"] else "-",
            str(f["criteria"]),
            f["title"],
        ]
        for f in found
    ]
    _show(screen, [table(screen, [*columns, Column("OUTCOME", flexible=True)], cells)])


def gist(question: str) -> str:
    """A question in one line: what it asks about (a command, a path), without the heading every question of its
    kind shares (`Command, run once by /bin/bash in a new process:`)."""
    lines = [line.strip() for line in question.split("\n") if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        lines = lines[1:]
    return " ".join(lines)


def _grade(screen: Screen, grade: str) -> str:
    colours = {"pass": "green", "fail": "red", "blocked": "red", "in_progress": "yellow", "sleeping": "cyan"}
    return screen.style(grade, colours[grade]) if grade in colours else grade


def _trend(history: Sequence[outcomes.EvaluationRecord]) -> str | None:
    """The grades oldest to newest as one line of marks: + pass, x fail or blocked, . anything else."""
    if len(history) < 2:
        return None
    marks = {"pass": "+", "fail": "x", "blocked": "x"}
    return "trend: " + "".join(marks.get(e.grade_status, ".") for e in history)


# approvals -----------------------------------------------------------------------------------------------------


async def _approvals(place: StatePlace, args: argparse.Namespace, screen: Screen) -> None:
    where = "" if args.all else "WHERE status IN ('pending', 'approved')"
    async with state_database(place) as db, db.read() as tx:
        total = int(await tx.scalar(f"SELECT COUNT(*) FROM approvals {where}"))
        rows = [
            as_dict(row)
            for row in await tx.fetchall(
                "SELECT id, session_id, kind, tool_name, status, requested_at, decided_at, decided_by, note, "
                f"remember, question FROM approvals {where} ORDER BY requested_at DESC, id DESC LIMIT ?",
                (args.limit,),
            )
        ]
    if args.json:
        _json({"total": total, "approvals": [wire(r, "requestId") for r in rows]})
        return
    if not rows:
        print("No permission requests waiting." if not args.all else "No permission requests yet.")
        return
    short, session = short_ids([r["id"] for r in rows]), short_ids([r["session_id"] for r in rows])
    columns = [Column(h) for h in ("REQUEST", "STATUS", "TOOL", "SESSION", "ASKED", "BY")]
    cells = [
        [
            short[r["id"]],
            screen.style(r["status"], "yellow") if r["status"] == "pending" else r["status"],
            r["tool_name"],
            session[r["session_id"]],
            age(r["requested_at"]),
            r["decided_by"] or "-",
            r["note"] or gist(r["question"] or ""),
        ]
        for r in rows
    ]
    hint = None if args.all else "`managed-tools pending` shows each question whole; approve ID / deny ID answer it."
    _show(screen, [table(screen, [*columns, Column("QUESTION", flexible=True)], cells), more(len(rows), total), hint])
