"""An intent's task has no foreign key in the database: the journal's tables become partitioned
by task (journal 0015), and a range of them is dropped whole by its retention, which this app
follows by unlinking its rows (docs/design.md §17). Before journal 0015, which rebuilds the
tables only once nothing else refers to them."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0006_intents"),
        ("journal", "0014_named_arguments"),
    ]

    run_before = [("journal", "0015_partitions")]

    operations = [
        migrations.AlterField(
            model_name="intentkey",
            name="task",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="journal.task",
            ),
        ),
    ]
