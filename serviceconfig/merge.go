package serviceconfig

import (
	"bytes"
	"encoding/json"
	"io"
)

// grpc-go decodes a service config with encoding/json into structs whose
// objects are pointers to structs: a key given twice in one object is
// decoded twice into the same value, so that two copies of an object merge,
// field by field, the later winning, and any other value is replaced by
// the later copy. merged gives a document that semantics, so that Parse
// reads what grpc-go reads.

// merged returns data, valid JSON, with every key given twice in an object
// merged as encoding/json merges it into a pointer to a struct: two objects
// merge key by key, recursively; otherwise the later value wins. A
// document without such a key is returned as it is.
func merged(data []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, dup, err := readValue(dec)
	if err != nil || !dup {
		return data
	}
	var b bytes.Buffer
	writeValue(&b, v)
	return b.Bytes()
}

// object is a JSON object with its keys in order.
type object struct {
	keys []string
	vals map[string]any
}

// readValue reads one JSON value from dec: an *object, a []any, or a
// json.Token (string, json.Number, bool, nil). It reports whether an
// object in it had a key twice.
func readValue(dec *json.Decoder) (v any, dup bool, err error) {
	t, err := dec.Token()
	if err != nil {
		return nil, false, err
	}
	switch t {
	case json.Delim('{'):
		o := &object{vals: make(map[string]any)}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, false, err
			}
			k, _ := kt.(string)
			val, d, err := readValue(dec)
			if err != nil {
				return nil, false, err
			}
			dup = dup || d
			if old, ok := o.vals[k]; ok {
				dup = true
				val = mergeValues(old, val)
			} else {
				o.keys = append(o.keys, k)
			}
			o.vals[k] = val
		}
		_, err = dec.Token() // '}'
		return o, dup, err
	case json.Delim('['):
		var a []any
		for dec.More() {
			val, d, err := readValue(dec)
			if err != nil {
				return nil, false, err
			}
			dup = dup || d
			a = append(a, val)
		}
		_, err = dec.Token() // ']'
		return a, dup, err
	}
	return t, false, nil
}

// mergeValues returns what encoding/json leaves of old after decoding
// later into the same pointer to a struct.
func mergeValues(old, later any) any {
	o, ok1 := old.(*object)
	l, ok2 := later.(*object)
	if !ok1 || !ok2 {
		return later
	}
	for _, k := range l.keys {
		if prev, ok := o.vals[k]; ok {
			o.vals[k] = mergeValues(prev, l.vals[k])
		} else {
			o.keys = append(o.keys, k)
			o.vals[k] = l.vals[k]
		}
	}
	return o
}

// writeValue writes v, as readValue reads it, as JSON.
func writeValue(w io.Writer, v any) {
	switch v := v.(type) {
	case *object:
		io.WriteString(w, "{")
		for i, k := range v.keys {
			if i > 0 {
				io.WriteString(w, ",")
			}
			kb, _ := json.Marshal(k)
			w.Write(kb)
			io.WriteString(w, ":")
			writeValue(w, v.vals[k])
		}
		io.WriteString(w, "}")
	case []any:
		io.WriteString(w, "[")
		for i, e := range v {
			if i > 0 {
				io.WriteString(w, ",")
			}
			writeValue(w, e)
		}
		io.WriteString(w, "]")
	case json.Number:
		io.WriteString(w, v.String())
	default: // string, bool, nil
		b, _ := json.Marshal(v)
		w.Write(b)
	}
}
