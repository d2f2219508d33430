"""A finding's task and step (or entry) have no foreign keys in the database: the journal's
tables become partitioned by task (journal 0015), and a range of them is dropped whole by
its retention, which this app follows by removing its rows about it (docs/design.md §17).
Before journal 0015, which rebuilds the tables only once nothing else refers to them."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agentops_audit", "0002_operator_groups"),
        ("journal", "0014_named_arguments"),
    ]

    run_before = [("journal", "0015_partitions")]

    operations = [
        migrations.AlterField(
            model_name="finding",
            name="step",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="journal.step",
            ),
        ),
        migrations.AlterField(
            model_name="finding",
            name="task",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="journal.task",
            ),
        ),
    ]
