"""taint, instance status and staleness, want generations; indexes for the detail and list views

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'derivatives',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('want_id', sa.String(length=64), nullable=False),
        sa.Column('job_run_id', sa.String(length=64), nullable=False),
        sa.Column('ref', sa.String(length=512), nullable=False),
        sa.Column('derivative_want_id', sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('derivatives', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_derivatives_want_id'), ['want_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_derivatives_job_run_id'), ['job_run_id'], unique=False)
        batch_op.create_index(
            batch_op.f('ix_derivatives_derivative_want_id'), ['derivative_want_id'], unique=False
        )
    _backfill_derivatives()
    if op.get_bind().dialect.name == 'postgresql':  # LIKE 'prefix%' on refs (see schema.py)
        for table in ('events', 'wants', 'partitions', 'job_run_outputs'):
            op.create_index(
                f'ix_{table}_ref_pattern', table, ['ref'], postgresql_ops={'ref': 'varchar_pattern_ops'}
            )
    with op.batch_alter_table('wants', schema=None) as batch_op:
        batch_op.add_column(sa.Column('generation', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('instance_id', sa.String(length=64), nullable=True))
        batch_op.create_index(batch_op.f('ix_wants_created_at'), ['created_at'], unique=False)
    with op.batch_alter_table('partitions', schema=None) as batch_op:
        batch_op.add_column(sa.Column('generation', sa.Integer(), nullable=False, server_default='0'))
        batch_op.add_column(sa.Column('reason', sa.Text(), nullable=True))
    with op.batch_alter_table('partition_instances', schema=None) as batch_op:
        batch_op.add_column(sa.Column('status', sa.String(length=16), nullable=False, server_default='live'))
        batch_op.add_column(sa.Column('stale_cause', sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column('reason', sa.Text(), nullable=True))
    with op.batch_alter_table('job_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_job_runs_created_at'), ['created_at'], unique=False)
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_job_run_type', ['job_run_id', 'type'], unique=False)
    # Instances replaced by a later build, recorded before instance status existed.
    op.execute(
        "UPDATE partition_instances SET status = 'superseded' WHERE instance_id NOT IN "
        "(SELECT instance_id FROM partitions WHERE instance_id IS NOT NULL)"
    )
    _backfill_from_events()


def _backfill_derivatives() -> None:
    bind = op.get_bind()
    events = sa.table('events', sa.column('idx'), sa.column('type'), sa.column('data', sa.JSON))
    derivatives = sa.table(
        'derivatives',
        sa.column('want_id'),
        sa.column('job_run_id'),
        sa.column('ref'),
        sa.column('derivative_want_id'),
    )
    rows = []
    query = sa.select(events.c.data).where(events.c.type == 'WantUpstreamBuilding').order_by(events.c.idx)
    for (data,) in bind.execute(query):
        ids = data.get('derivative_want_ids') or []
        for i, ref in enumerate(data.get('missing') or []):
            rows.append({
                'want_id': data['want_id'],
                'job_run_id': data['job_run_id'],
                'ref': ref,
                'derivative_want_id': ids[i] if i < len(ids) else None,
            })
    if rows:
        bind.execute(sa.insert(derivatives), rows)


def _backfill_from_events() -> None:
    """What replaying the log would set: the instance each want got, and why a partition is failed."""
    bind = op.get_bind()
    events = sa.table('events', sa.column('idx'), sa.column('type'), sa.column('data', sa.JSON))
    wants = sa.table('wants', sa.column('want_id'), sa.column('instance_id'))
    partitions = sa.table('partitions', sa.column('ref'), sa.column('status'), sa.column('reason'))
    query = (
        sa.select(events.c.type, events.c.data)
        .where(events.c.type.in_(['WantSucceeded', 'PartitionFailed']))
        .order_by(events.c.idx)
    )
    got: dict[str, str] = {}
    failures: dict[str, str] = {}
    for kind, data in bind.execute(query):
        if kind == 'WantSucceeded' and data.get('instance_id'):
            got[data['want_id']] = data['instance_id']
        elif kind == 'PartitionFailed':
            failures[data['ref']] = f"job run {data['job_run_id']} failed: {data['reason']}"
    for want_id, instance_id in got.items():
        bind.execute(sa.update(wants).where(wants.c.want_id == want_id).values(instance_id=instance_id))
    for ref, reason in failures.items():
        bind.execute(
            sa.update(partitions)
            .where(partitions.c.ref == ref, partitions.c.status == 'failed')
            .values(reason=reason)
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        for table in ('events', 'wants', 'partitions', 'job_run_outputs'):
            op.drop_index(f'ix_{table}_ref_pattern', table_name=table)
    op.drop_table('derivatives')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_job_run_type')
    with op.batch_alter_table('job_runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_runs_created_at'))
    with op.batch_alter_table('partition_instances', schema=None) as batch_op:
        batch_op.drop_column('reason')
        batch_op.drop_column('stale_cause')
        batch_op.drop_column('status')
    with op.batch_alter_table('partitions', schema=None) as batch_op:
        batch_op.drop_column('reason')
        batch_op.drop_column('generation')
    with op.batch_alter_table('wants', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_wants_created_at'))
        batch_op.drop_column('instance_id')
        batch_op.drop_column('generation')
