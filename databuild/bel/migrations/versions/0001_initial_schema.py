"""initial schema

Revision ID: 0001
Revises: 
"""

import sqlalchemy as sa
from alembic import op

import databuild.bel.schema


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('bel_head',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('last_idx', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.bulk_insert(sa.table("bel_head", sa.column("id", sa.Integer), sa.column("last_idx", sa.BigInteger)), [{"id": 1, "last_idx": 0}])
    op.create_table('delegations',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('want_id', sa.String(length=64), nullable=False),
    sa.Column('ref', sa.String(length=512), nullable=False),
    sa.Column('delegated_to', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('at', databuild.bel.schema.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('delegations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_delegations_delegated_to'), ['delegated_to'], unique=False)
        batch_op.create_index(batch_op.f('ix_delegations_want_id'), ['want_id'], unique=False)

    op.create_table('events',
    sa.Column('idx', sa.BigInteger(), autoincrement=False, nullable=False),
    sa.Column('type', sa.String(length=64), nullable=False),
    sa.Column('at', databuild.bel.schema.UTCDateTime(timezone=True), nullable=False),
    sa.Column('want_id', sa.String(length=64), nullable=True),
    sa.Column('job_run_id', sa.String(length=64), nullable=True),
    sa.Column('ref', sa.String(length=512), nullable=True),
    sa.Column('data', sa.JSON(), nullable=False),
    sa.PrimaryKeyConstraint('idx')
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_events_job_run_id'), ['job_run_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_events_ref'), ['ref'], unique=False)
        batch_op.create_index(batch_op.f('ix_events_want_id'), ['want_id'], unique=False)

    op.create_table('job_run_leases',
    sa.Column('job_run_id', sa.String(length=64), nullable=False),
    sa.Column('expires_at', databuild.bel.schema.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('job_run_id')
    )
    op.create_table('job_run_outputs',
    sa.Column('job_run_id', sa.String(length=64), nullable=False),
    sa.Column('ref', sa.String(length=512), nullable=False),
    sa.PrimaryKeyConstraint('job_run_id', 'ref')
    )
    with op.batch_alter_table('job_run_outputs', schema=None) as batch_op:
        batch_op.create_index('ix_job_run_outputs_ref', ['ref'], unique=False)

    op.create_table('job_runs',
    sa.Column('job_run_id', sa.String(length=64), nullable=False),
    sa.Column('job_label', sa.String(length=256), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('outputs', sa.JSON(), nullable=False),
    sa.Column('params', sa.JSON(), nullable=False),
    sa.Column('want_id', sa.String(length=64), nullable=True),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('lost', sa.Boolean(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('missing', sa.JSON(), nullable=False),
    sa.Column('workflow_id', sa.String(length=1024), nullable=False),
    sa.Column('created_at', databuild.bel.schema.UTCDateTime(timezone=True), nullable=False),
    sa.Column('updated_at', databuild.bel.schema.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('job_run_id')
    )
    with op.batch_alter_table('job_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_job_runs_job_label'), ['job_label'], unique=False)
        batch_op.create_index(batch_op.f('ix_job_runs_state'), ['state'], unique=False)
        batch_op.create_index(batch_op.f('ix_job_runs_want_id'), ['want_id'], unique=False)

    op.create_table('partition_instances',
    sa.Column('instance_id', sa.String(length=64), nullable=False),
    sa.Column('ref', sa.String(length=512), nullable=False),
    sa.Column('job_run_id', sa.String(length=64), nullable=True),
    sa.Column('external', sa.Boolean(), nullable=False),
    sa.Column('created_at', databuild.bel.schema.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('instance_id')
    )
    with op.batch_alter_table('partition_instances', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_partition_instances_job_run_id'), ['job_run_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_partition_instances_ref'), ['ref'], unique=False)

    op.create_table('partitions',
    sa.Column('ref', sa.String(length=512), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('instance_id', sa.String(length=64), nullable=True),
    sa.Column('built_by', sa.String(length=64), nullable=True),
    sa.Column('building_job_run_id', sa.String(length=64), nullable=True),
    sa.Column('external', sa.Boolean(), nullable=False),
    sa.Column('updated_at', databuild.bel.schema.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('ref')
    )
    with op.batch_alter_table('partitions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_partitions_building_job_run_id'), ['building_job_run_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_partitions_status'), ['status'], unique=False)

    op.create_table('read_deps',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('job_run_id', sa.String(length=64), nullable=False),
    sa.Column('ref', sa.String(length=512), nullable=False),
    sa.Column('instance_id', sa.String(length=64), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('read_deps', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_read_deps_instance_id'), ['instance_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_read_deps_job_run_id'), ['job_run_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_read_deps_ref'), ['ref'], unique=False)

    op.create_table('subscriptions',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('ref', sa.String(length=512), nullable=False),
    sa.Column('want_id', sa.String(length=64), nullable=False),
    sa.Column('workflow_id', sa.String(length=1024), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('ref', 'want_id', name='uq_subscriptions_ref_want')
    )
    with op.batch_alter_table('subscriptions', schema=None) as batch_op:
        batch_op.create_index('ix_subscriptions_ref_id', ['ref', 'id'], unique=False)
        batch_op.create_index(batch_op.f('ix_subscriptions_want_id'), ['want_id'], unique=False)

    op.create_table('want_job_runs',
    sa.Column('want_id', sa.String(length=64), nullable=False),
    sa.Column('job_run_id', sa.String(length=64), nullable=False),
    sa.Column('relation', sa.String(length=16), nullable=False),
    sa.PrimaryKeyConstraint('want_id', 'job_run_id')
    )
    with op.batch_alter_table('want_job_runs', schema=None) as batch_op:
        batch_op.create_index('ix_want_job_runs_job_run', ['job_run_id'], unique=False)

    op.create_table('wants',
    sa.Column('want_id', sa.String(length=64), nullable=False),
    sa.Column('ref', sa.String(length=512), nullable=False),
    sa.Column('data_timestamp', databuild.bel.schema.UTCDateTime(timezone=True), nullable=False),
    sa.Column('sla_seconds', sa.Float(), nullable=True),
    sa.Column('ttl_seconds', sa.Float(), nullable=True),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('parent_want_id', sa.String(length=64), nullable=True),
    sa.Column('root_want_id', sa.String(length=64), nullable=True),
    sa.Column('state', sa.String(length=24), nullable=False),
    sa.Column('sla_missed', sa.Boolean(), nullable=False),
    sa.Column('sla_deadline', databuild.bel.schema.UTCDateTime(timezone=True), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('job_run_id', sa.String(length=64), nullable=True),
    sa.Column('decision_seq', sa.Integer(), nullable=False),
    sa.Column('workflow_id', sa.String(length=1024), nullable=False),
    sa.Column('created_at', databuild.bel.schema.UTCDateTime(timezone=True), nullable=False),
    sa.Column('updated_at', databuild.bel.schema.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('want_id')
    )
    with op.batch_alter_table('wants', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_wants_parent_want_id'), ['parent_want_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_wants_ref'), ['ref'], unique=False)
        batch_op.create_index(batch_op.f('ix_wants_root_want_id'), ['root_want_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_wants_sla_deadline'), ['sla_deadline'], unique=False)
        batch_op.create_index(batch_op.f('ix_wants_state'), ['state'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('wants', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_wants_state'))
        batch_op.drop_index(batch_op.f('ix_wants_sla_deadline'))
        batch_op.drop_index(batch_op.f('ix_wants_root_want_id'))
        batch_op.drop_index(batch_op.f('ix_wants_ref'))
        batch_op.drop_index(batch_op.f('ix_wants_parent_want_id'))

    op.drop_table('wants')
    with op.batch_alter_table('want_job_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_want_job_runs_job_run')

    op.drop_table('want_job_runs')
    with op.batch_alter_table('subscriptions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_subscriptions_want_id'))
        batch_op.drop_index('ix_subscriptions_ref_id')

    op.drop_table('subscriptions')
    with op.batch_alter_table('read_deps', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_read_deps_ref'))
        batch_op.drop_index(batch_op.f('ix_read_deps_job_run_id'))
        batch_op.drop_index(batch_op.f('ix_read_deps_instance_id'))

    op.drop_table('read_deps')
    with op.batch_alter_table('partitions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_partitions_status'))
        batch_op.drop_index(batch_op.f('ix_partitions_building_job_run_id'))

    op.drop_table('partitions')
    with op.batch_alter_table('partition_instances', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_partition_instances_ref'))
        batch_op.drop_index(batch_op.f('ix_partition_instances_job_run_id'))

    op.drop_table('partition_instances')
    with op.batch_alter_table('job_runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_runs_want_id'))
        batch_op.drop_index(batch_op.f('ix_job_runs_state'))
        batch_op.drop_index(batch_op.f('ix_job_runs_job_label'))

    op.drop_table('job_runs')
    with op.batch_alter_table('job_run_outputs', schema=None) as batch_op:
        batch_op.drop_index('ix_job_run_outputs_ref')

    op.drop_table('job_run_outputs')
    op.drop_table('job_run_leases')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_events_want_id'))
        batch_op.drop_index(batch_op.f('ix_events_ref'))
        batch_op.drop_index(batch_op.f('ix_events_job_run_id'))

    op.drop_table('events')
    with op.batch_alter_table('delegations', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_delegations_want_id'))
        batch_op.drop_index(batch_op.f('ix_delegations_delegated_to'))

    op.drop_table('delegations')
    op.drop_table('bel_head')
