package persistence

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
)

// The helpers below are the get, put, delete and list that the Memory
// stores share: each checks ctx first, then the argument, then works on one
// of the Memory's maps under its lock, storing and returning clones. rows
// is a map that NewMemory made; it is never replaced, so it may be passed
// in before the lock is taken.

// memGet returns a clone of rows[key]. An invalid key (named what, as in
// "task id") is ErrInvalid; a missing one is ErrNotFound, "get <noun> <key>".
func memGet[T proto.Message](ctx context.Context, m *Memory, rows map[string]T, key, what, noun string) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if err := checkID(what, key); err != nil {
		return zero, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	x, ok := rows[key]
	if !ok {
		return zero, fmt.Errorf("get %s %q: %w", noun, key, ErrNotFound)
	}
	return clone(x), nil
}

// memPut stores a clone of x under key, unless invalid (the record's
// validation error, nil when it is valid) says otherwise.
func memPut[T proto.Message](ctx context.Context, m *Memory, rows map[string]T, key string, x T, invalid error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if invalid != nil {
		return invalid
	}
	x = clone(x)
	m.mu.Lock()
	defer m.mu.Unlock()
	rows[key] = x
	return nil
}

// memDelete removes rows[key]; a missing key is no error, an invalid one
// (named what) is.
func memDelete[T proto.Message](ctx context.Context, m *Memory, rows map[string]T, key, what string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := checkID(what, key); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(rows, key)
	return nil
}

// memList returns clones of the rows keep selects (all of them when keep is
// nil) in key order, unless invalid (the query's validation error, nil when
// it is valid) says otherwise.
func memList[T proto.Message](ctx context.Context, m *Memory, rows map[string]T, invalid error, keep func(T) bool) ([]T, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if invalid != nil {
		return nil, invalid
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return sortedValues(rows, keep), nil
}

// checkIDOf checks a record keyed by its id: present, with a valid id
// ("nil run", "run id").
func checkIDOf[M any, T interface {
	*M
	GetId() string
}](x T, noun string) error {
	if x == nil {
		return fmt.Errorf("nil %s: %w", noun, ErrInvalid)
	}
	return checkID(noun+" id", x.GetId())
}
