"""The operators' groups (agentops migration 0004) see the provider audit's findings; those
who act may also resolve them."""

from __future__ import annotations

from typing import Any

from django.db import migrations

READ_ONLY = "Operators (read-only)"
ACTING = "Operators"


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
    ours = permission.objects.using(alias).filter(content_type__app_label="agentops_audit")
    viewer, _ = group.objects.using(alias).get_or_create(name=READ_ONLY)
    viewer.permissions.add(*ours.filter(codename="view_finding"))
    actor, _ = group.objects.using(alias).get_or_create(name=ACTING)
    actor.permissions.add(*ours.filter(codename__in=["view_finding", "resolve_finding"]))


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("agentops", "0004_operator_groups"),
        ("agentops_audit", "0001_audit"),
    ]

    operations = [migrations.RunPython(groups, migrations.RunPython.noop)]
