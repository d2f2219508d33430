"""What the support example gives agentops (found when Django starts, like ``admin.py``):
its tools, its kind and playbook, and the stand-in provider ``make run`` starts unless
``SUPPORT_API_BASE`` points at a real one."""

from __future__ import annotations

from agentops import effects
from examples.support.kinds import GOODWILL
from examples.support.playbooks import goodwill
from examples.support.tools import IssueCredit, LookUpOrder, PostNote, VoidCredit

for tool in (LookUpOrder, PostNote, IssueCredit, VoidCredit):
    effects.register_tool(tool)
effects.register_kind(GOODWILL)
effects.register_playbook("goodwill")(goodwill)
effects.register_sandbox(
    effects.Sandbox(
        name="support",
        module="examples.support.sandbox",
        port=8104,
        port_setting="AGENTOPS_SANDBOX_SUPPORT_PORT",
        unless="SUPPORT_API_BASE",
        settings={"SUPPORT_API_BASE": "{url}"},
    )
)
