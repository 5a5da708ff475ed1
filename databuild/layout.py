"""The storage layout before instance locations: each ref's data in the ref's own folder (marked with
its instance id), replaced by renames, with the replaced data moved to ``_databuild/trash`` until the
BEL commit. ``databuild migrate`` moves every live instance of that layout into its instance location;
nothing else reads this layout any more."""

from databuild.bel.queries import BelQueries
from databuild.models import InstanceRef, PartitionStatus
from databuild.refs import RESERVED_SEGMENT
from databuild.storage import Storage

LEGACY_MARKER = "_DATABUILD_INSTANCE"
LEGACY_FOLDERS = (f"{RESERVED_SEGMENT}/staging", f"{RESERVED_SEGMENT}/trash")
PAGE = 1000


def migrate_storage(storage: Storage, bel: BelQueries) -> list[InstanceRef]:
    """Move each live, DataBuild-built instance still in the old layout into its instance location, and
    then remove the old layout's staging and trash folders. Idempotent; run it with the workers stopped."""
    trashed = _trashed_instances(storage)
    moved: list[InstanceRef] = []
    offset = 0
    while page := bel.partitions(status=PartitionStatus.live, limit=PAGE, offset=offset):
        offset += len(page)
        for partition in page:
            if partition.external or partition.instance_id is None:
                continue  # announced data stays where its producer put it
            ref, instance_id = partition.ref, partition.instance_id
            try:
                target = storage.instance_key(ref, instance_id)
            except ValueError:
                continue  # not an id DataBuild made (it makes UUIDs), so nothing it stored
            if storage.exists(target):
                continue
            if _marker_at(storage, ref) == instance_id:
                for name, is_folder in storage.entries(ref):
                    if not is_folder and name != LEGACY_MARKER:  # folders: other refs, instance locations
                        storage.move(f"{ref}/{name}", f"{target}/{name}")
                storage.delete(f"{ref}/{LEGACY_MARKER}")
            elif instance_id in trashed:  # a publish killed before its commit had moved it aside
                storage.move(trashed[instance_id], target)
                storage.delete(f"{target}/{LEGACY_MARKER}")
            else:
                continue
            moved.append(InstanceRef(ref=ref, instance_id=instance_id))
    for folder in LEGACY_FOLDERS:
        storage.delete(folder)
    return moved


def _trashed_instances(storage: Storage) -> dict[str, str]:
    found = {}
    trash = f"{RESERVED_SEGMENT}/trash"
    for publish, is_folder in storage.entries(trash):
        for name, inner in storage.entries(f"{trash}/{publish}") if is_folder else []:
            key = f"{trash}/{publish}/{name}"
            if inner and (instance_id := _marker_at(storage, key)):
                found[instance_id] = key
    return found


def _marker_at(storage: Storage, key: str) -> str | None:
    try:
        return storage.read_text(f"{key}/{LEGACY_MARKER}").strip()
    except FileNotFoundError:
        return None
