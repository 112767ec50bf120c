"""Fewer writes per search (docs/search.md, "Bounded work"): a search_history call inserts up
to a hundred evidence rows and one audit event in its one statement. Their workspace's own
foreign key and the single-column indexes of the workspace, the run (and the agent) are dropped:
the composite keys to the run, the message and the agent name the workspace already, and every
read goes through the composite or (…, created_at) indexes. Each step is a catalog change.
"""


import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('messages_app', '0016_alter_apitoken_options'),
    ]

    operations = [
        migrations.AlterField(
            model_name='runevidence',
            name='run',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='evidence', to='messages_app.run'),
        ),
        migrations.AlterField(
            model_name='runevidence',
            name='workspace',
            field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='messages_app.workspace'),
        ),
    ]
