package rest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxStreamBody bounds a listing read as a stream: its memory follows what
// the caller keeps, not its size, so the bound is only against an answer
// without end (50,000 jobs on 24.11: 228 MB compact).
const maxStreamBody = 4 << 30

// members are the top-level members of an answer other than the array
// streamed, kept raw: errors, warnings, meta, last_update (all small).
type members map[string]json.RawMessage

// decodeStream reads one JSON object from r, handing each element of the
// array under key to elem as it arrives, so a listing is never held whole:
// at 50,000 jobs the answer is 228 MB, of which the scheduler keeps a few
// of its own. A null or absent array is an empty one.
func decodeStream(r io.Reader, key string, elem func(*json.Decoder) error) (members, error) {
	d := json.NewDecoder(r)
	if err := delim(d, '{'); err != nil {
		return nil, err
	}
	rest := members{}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return nil, err
		}
		k, _ := t.(string)
		if k != key {
			var raw json.RawMessage
			if err := d.Decode(&raw); err != nil {
				return nil, fmt.Errorf("member %q: %w", k, err)
			}
			rest[k] = raw
			continue
		}
		if err := streamArray(d, elem); err != nil {
			return nil, fmt.Errorf("member %q: %w", k, err)
		}
	}
	if err := delim(d, '}'); err != nil {
		return nil, err
	}
	if _, err := d.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the answer's object")
	}
	return rest, nil
}

// streamArray reads a JSON array (or null) element by element.
func streamArray(d *json.Decoder, elem func(*json.Decoder) error) error {
	t, err := d.Token()
	if err != nil {
		return err
	}
	if t == nil {
		return nil
	}
	if t != json.Delim('[') {
		return fmt.Errorf("want an array, got %v", t)
	}
	for d.More() {
		if err := elem(d); err != nil {
			return err
		}
	}
	return delim(d, ']')
}

func delim(d *json.Decoder, want json.Delim) error {
	t, err := d.Token()
	if err != nil {
		return err
	}
	if t != want {
		return fmt.Errorf("want %v, got %v", want, t)
	}
	return nil
}

// lastUpdate reads a listing's last_update member (absent: zero).
func (m members) lastUpdate() (noVal64, error) {
	var v noVal64
	if raw, ok := m["last_update"]; ok {
		if err := json.Unmarshal(raw, &v); err != nil {
			return v, fmt.Errorf("last_update: %w", err)
		}
	}
	return v, nil
}

// countingReader counts the bytes read through it and keeps the first
// failure of the reader below (not io.EOF): a cut connection, not a
// malformed answer.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) && c.err == nil {
		c.err = err
	}
	return n, err
}
