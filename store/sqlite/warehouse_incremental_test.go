package sqlite

import (
	"testing"

	"github.com/dvtrun/dvtrun/store/storetest"
)

func TestWarehouseIncremental(t *testing.T) {
	storetest.RunWarehouseIncremental(t, openWarehouseT(t))
}
