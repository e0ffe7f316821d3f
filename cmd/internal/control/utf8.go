package control

import (
	"fmt"
	"reflect"
	"unicode/utf8"

	"github.com/strata-sandbox/strata/layers"
)

// checkUTF8 fails when a string in the arguments of a request is not valid
// UTF-8. Requests travel as JSON, which carries such a string as another
// one (each bad byte becomes U+FFFD): a path would name another file, a
// mount would land on another directory. So they are refused before they
// are sent.
func checkUTF8(args any) error {
	if s, bad := invalidUTF8(reflect.ValueOf(args)); bad {
		return fmt.Errorf("path or name %q is not valid UTF-8, which requests cannot carry: %w", s, layers.ErrInvalid)
	}
	return nil
}

// invalidUTF8 returns the first string in v, looking through pointers,
// interfaces, exported struct fields, slices and maps, that is not valid
// UTF-8.
func invalidUTF8(v reflect.Value) (string, bool) {
	switch v.Kind() {
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return v.String(), true
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return invalidUTF8(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				if s, bad := invalidUTF8(v.Field(i)); bad {
					return s, true
				}
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			if s, bad := invalidUTF8(v.Index(i)); bad {
				return s, true
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if s, bad := invalidUTF8(it.Key()); bad {
				return s, true
			}
			if s, bad := invalidUTF8(it.Value()); bad {
				return s, true
			}
		}
	}
	return "", false
}
