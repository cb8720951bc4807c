package report

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/gpubench/gpubench/internal/results"
)

// writeColl runs a writer over a run as a command does: Start, a Row per result, End.
func writeColl(t *testing.T, w CollWriter, r *CollRun) {
	t.Helper()
	if err := w.Start(r); err != nil {
		t.Fatal(err)
	}
	for _, res := range r.Summary.Results {
		if err := w.Row(r, res); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.End(r); err != nil {
		t.Fatal(err)
	}
}

// What the writers write, the reader reads back, field by field: a collective run as a document
// and as JSON lines, and a p2p run.
func TestRoundTrip(t *testing.T) {
	for name, r := range map[string]*CollRun{"coll": sampleColl(), "one rank": sampleOneRank()} {
		want := CollJSON(r)
		for _, form := range []string{results.FormDocument, results.FormLines} {
			t.Run(name+" "+form, func(t *testing.T) {
				var buf bytes.Buffer
				w, _ := NewCollWriter("json", &buf)
				if form == results.FormLines {
					w = NewCollStream(&buf)
				}
				writeColl(t, w, r)
				f, err := results.Read("run", buf.Bytes())
				if err != nil {
					t.Fatal(err)
				}
				if f.Form != form || !f.Complete || len(f.Notices) != 0 {
					t.Errorf("read as %s, complete %v, notices %q; want %s, complete, none", f.Form, f.Complete, f.Notices, form)
				}
				for _, d := range diff("Coll", reflect.ValueOf(want), reflect.ValueOf(f.Coll)) {
					t.Error(d)
				}
			})
		}
	}
	t.Run("p2p", func(t *testing.T) {
		r := sampleP2P()
		var buf bytes.Buffer
		if err := WriteP2P(&buf, "json", r); err != nil {
			t.Fatal(err)
		}
		f, err := results.Read("p2p", buf.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range diff("P2P", reflect.ValueOf(p2pJSON(r)), reflect.ValueOf(f.P2P)) {
			t.Error(d)
		}
	})
}

// The samples set every field of the schema somewhere, so that a field added to it is either in
// the round trip or fails here: add it to the samples.
func TestSamplesSetEveryField(t *testing.T) {
	all, set := map[string]bool{}, map[string]bool{}
	schemaFields(reflect.TypeFor[results.Coll](), all)
	schemaFields(reflect.TypeFor[results.P2P](), all)
	for _, v := range []any{CollJSON(sampleColl()), CollJSON(sampleOneRank()), p2pJSON(sampleP2P())} {
		setFields(reflect.ValueOf(v), set)
	}
	var unset []string
	for f := range all {
		if !set[f] {
			unset = append(unset, f)
		}
	}
	slices.Sort(unset)
	if len(unset) > 0 || len(all) < 80 {
		t.Errorf("%d schema fields, and these are zero in every sample: %s", len(all), strings.Join(unset, ", "))
	}
}

// schemaFields adds the exported fields of every struct type of package results reachable from
// t, as "Type.Field".
func schemaFields(t reflect.Type, all map[string]bool) {
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		schemaFields(t.Elem(), all)
	case reflect.Struct:
		if t.PkgPath() != reflect.TypeFor[results.Coll]().PkgPath() || all[t.Name()] {
			return
		}
		all[t.Name()] = true // seen: a type is walked once
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && f.Tag.Get("json") != "-" { // "-": read from nccl-tests only, never written
				all[t.Name()+"."+f.Name] = true
				schemaFields(f.Type, all)
			}
		}
	}
}

// setFields adds the struct fields that hold a value other than their zero somewhere in v, and
// the struct types it holds, named as schemaFields names them.
func setFields(v reflect.Value, set map[string]bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			setFields(v.Elem(), set)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			setFields(v.Index(i), set)
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			setFields(it.Value(), set)
		}
	case reflect.Struct:
		t := v.Type()
		set[t.Name()] = true
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && f.Tag.Get("json") != "-" { // "-": read from nccl-tests only, never written
				if !v.Field(i).IsZero() {
					set[t.Name()+"."+f.Name] = true
				}
				setFields(v.Field(i), set)
			}
		}
	}
}

// diff lists where two values of the same type differ, by path, comparing exported fields.
func diff(path string, a, b reflect.Value) []string {
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return []string{fmt.Sprintf("%s: wrote %v, read %v", path, show(a), show(b))}
			}
			return nil
		}
		return diff(path, a.Elem(), b.Elem())
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && (a.IsNil() != b.IsNil() || a.Len() != b.Len()) {
			return []string{fmt.Sprintf("%s: wrote %d elements (nil %v), read %d (nil %v)", path, a.Len(), a.IsNil(), b.Len(), b.IsNil())}
		}
		var out []string
		for i := range a.Len() {
			out = append(out, diff(fmt.Sprintf("%s[%d]", path, i), a.Index(i), b.Index(i))...)
		}
		return out
	case reflect.Map:
		if a.Len() != b.Len() {
			return []string{fmt.Sprintf("%s: wrote %d keys, read %d", path, a.Len(), b.Len())}
		}
		var out []string
		for it := a.MapRange(); it.Next(); {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() {
				out = append(out, fmt.Sprintf("%s[%v]: wrote it, read none", path, it.Key()))
				continue
			}
			out = append(out, diff(fmt.Sprintf("%s[%v]", path, it.Key()), it.Value(), bv)...)
		}
		return out
	case reflect.Struct:
		var out []string
		for i := range a.NumField() {
			if f := a.Type().Field(i); f.IsExported() {
				out = append(out, diff(path+"."+f.Name, a.Field(i), b.Field(i))...)
			}
		}
		return out
	}
	if !a.Equal(b) {
		return []string{fmt.Sprintf("%s: wrote %v, read %v", path, show(a), show(b))}
	}
	return nil
}

func show(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "nil"
		}
		v = v.Elem()
	}
	return fmt.Sprintf("%#v", v.Interface())
}
