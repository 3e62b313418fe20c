package slurmrest

import (
	"time"
)

// missesBeforeDelete is how many full listings in a row must lack an object
// before the cache calls it deleted. One listing taken while slurmctld
// restarts or reloads its state can be short; two in a row are not.
const missesBeforeDelete = 2

// event is one change found by applying a listing.
type event[T any] struct {
	typ      string // add, update, delete
	old, new *T
}

// view is the cache's copy of one kind of object, keyed by K.
type view[K comparable, T any] struct {
	key    func(*T) K
	equal  func(a, b *T) bool
	items  map[K]*T
	misses map[K]int
	since  time.Time // update_time for the next poll; zero lists in full
	synced bool
	// heldNewer says whether the view holds k as read after asked (a node
	// followed by name while a listing asked at asked was under way): the
	// listing neither replaces it nor counts it missing. nil: never.
	heldNewer func(k K, asked time.Time) bool
}

func newView[K comparable, T any](key func(*T) K, equal func(a, b *T) bool) *view[K, T] {
	return &view[K, T]{key: key, equal: equal, items: map[K]*T{}, misses: map[K]int{}}
}

// apply merges a full listing into the view and returns the changes, in
// listing order then deletions.
func (v *view[K, T]) apply(list []T, lastUpdate, now time.Time) []event[T] {
	return v.merge(list, lastUpdate, now, true)
}

// applyChanges merges a listing like apply but counts no misses: a listing
// taken between two regular polls (RefreshJobs) brings adds and updates
// sooner, while a deletion still takes missesBeforeDelete regular listings
// (PollInterval apart), so a short listing during a slurmctld restart is
// never read as jobs gone.
func (v *view[K, T]) applyChanges(list []T, lastUpdate, now time.Time) []event[T] {
	return v.merge(list, lastUpdate, now, false)
}

func (v *view[K, T]) merge(list []T, lastUpdate, now time.Time, countMisses bool) []event[T] {
	var evs []event[T]
	seen := make(map[K]struct{}, len(list))
	for i := range list {
		obj := &list[i]
		k := v.key(obj)
		seen[k] = struct{}{}
		if v.newer(k, now) {
			continue
		}
		delete(v.misses, k)
		old, ok := v.items[k]
		switch {
		case !ok:
			evs = append(evs, event[T]{typ: "add", new: obj})
		case !v.equal(old, obj):
			evs = append(evs, event[T]{typ: "update", old: old, new: obj})
		}
		v.items[k] = obj
	}
	for k := range v.items {
		if _, ok := seen[k]; ok || !countMisses || v.newer(k, now) {
			continue
		}
		evs = v.miss(k, evs)
	}
	v.since = nextSince(lastUpdate, now)
	if len(v.misses) > 0 {
		// Confirm or clear a miss with the next full listing.
		v.since = time.Time{}
	}
	v.synced = true
	return evs
}

// newer says whether the view's k was read after asked (heldNewer).
func (v *view[K, T]) newer(k K, asked time.Time) bool {
	return v.heldNewer != nil && v.heldNewer(k, asked)
}

// nextSince is the update_time for the poll after a listing taken at "now".
// Slurm's update times have one-second resolution and it answers "no change"
// when its last change <= update_time, so a change made later in the same
// second as the listing would be missed if we asked from lastUpdate: while
// the listing is from that same second, ask from one second earlier.
func nextSince(lastUpdate, now time.Time) time.Time {
	if lastUpdate.IsZero() {
		return time.Time{}
	}
	if now.Unix() <= lastUpdate.Unix() {
		return lastUpdate.Add(-time.Second)
	}
	return lastUpdate
}

func (v *view[K, T]) get(k K) (*T, bool) {
	o, ok := v.items[k]
	return o, ok
}

func (v *view[K, T]) list() []T {
	out := make([]T, 0, len(v.items))
	for _, o := range v.items {
		out = append(out, *o)
	}
	return out
}

// follow merges objects read one by one (FollowJobs) into the view: an
// object keep refuses is not held (and leaves the view if it was); the
// keys in gone, which Slurm denies knowing, leave it after
// missesBeforeDelete follows in a row. Nothing else is touched.
func (v *view[K, T]) follow(objs []T, gone []K, keep func(*T) bool) []event[T] {
	var evs []event[T]
	for i := range objs {
		obj := &objs[i]
		k := v.key(obj)
		delete(v.misses, k)
		old, held := v.items[k]
		switch {
		case keep != nil && !keep(obj):
			if held {
				delete(v.items, k)
				evs = append(evs, event[T]{typ: "delete", old: old})
			}
			continue
		case !held:
			evs = append(evs, event[T]{typ: "add", new: obj})
		case !v.equal(old, obj):
			evs = append(evs, event[T]{typ: "update", old: old, new: obj})
		}
		v.items[k] = obj
	}
	for _, k := range gone {
		if _, held := v.items[k]; held {
			evs = v.miss(k, evs)
		}
	}
	return evs
}

// miss counts one more listing or read that lacked the held object k; the
// missesBeforeDelete-th deletes it, appended to evs.
func (v *view[K, T]) miss(k K, evs []event[T]) []event[T] {
	v.misses[k]++
	if v.misses[k] < missesBeforeDelete {
		return evs
	}
	old := v.items[k]
	delete(v.items, k)
	delete(v.misses, k)
	return append(evs, event[T]{typ: "delete", old: old})
}
