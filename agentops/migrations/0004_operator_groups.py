"""Two groups for people (agentops/operators): who may only look, and who may act. Made by
journal migration 0006 before; get_or_create, so a database that has them keeps them."""

from __future__ import annotations

from typing import Any

from django.db import migrations

READ_ONLY = "Operators (read-only)"
ACTING = "Operators"
VIEW = ["view_task", "view_step", "view_entry", "view_approval"]
ACT = [
    "start_task",
    "reconcile_step",
    "resolve_step",
    "decide_approval",
    "compensate_saga",
    "resume_task",
]


def groups(apps: Any, schema_editor: Any) -> None:
    from django.contrib.auth.management import create_permissions

    # Permissions are made after migrations; these groups need them now.
    for config in apps.get_app_configs():
        config.models_module = True
        create_permissions(config, verbosity=0, apps=apps, using=schema_editor.connection.alias)
        config.models_module = None
    alias = schema_editor.connection.alias
    group = apps.get_model("auth", "Group")
    permission = apps.get_model("auth", "Permission")
    journal = {"content_type__app_label": "journal"}
    viewer, _ = group.objects.using(alias).get_or_create(name=READ_ONLY)
    viewer.permissions.set(permission.objects.using(alias).filter(codename__in=VIEW, **journal))
    actor, _ = group.objects.using(alias).get_or_create(name=ACTING)
    actor.permissions.set(
        permission.objects.using(alias).filter(codename__in=VIEW + ACT, **journal)
    )


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("agentops", "0003_journal_frozen_facts"),
        ("journal", "0006_operators"),
    ]

    operations = [migrations.RunPython(groups, migrations.RunPython.noop)]
